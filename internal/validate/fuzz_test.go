package validate

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/paysvc/paysvc/internal/canonjson"
)

// FuzzFields: the money and text rules (README.md, "Orders and refunds") against an
// independent oracle, on values as canonjson parses them from a client's
// JSON. An amount is accepted exactly when it is a plain integer literal in
// [1, 10^12]; a currency exactly when it is three ASCII upper-case letters;
// a text exactly when it is a string of 1..64 characters without control
// characters. Every refusal is a *Error naming the field, bounded in size.
func FuzzFields(f *testing.F) {
	for _, v := range []string{
		`1`, `0`, `-0`, `-1`, `1999`, `1000000000000`, `1000000000001`, `1.0`, `1e3`, `1E0`,
		`99999999999999999999`, `"1"`, `"EUR"`, `"eur"`, `"EURO"`, `"ÉUR"`, `null`, `true`, `[]`, `{}`,
		`"a\u0000"`, `"\u0085"`, `"\u2028"`, `""`, `"` + string(make([]byte, 0)) + `"`,
	} {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, lit []byte) {
		tree, err := canonjson.Parse(append(append([]byte(`{"v":`), lit...), '}'))
		if err != nil {
			return
		}
		v := tree.(map[string]any)["v"]

		fa := New(map[string]any{"v": v}, "p.")
		amt := fa.Amount("v")
		num, isNum := v.(json.Number)
		wantAmt := isNum && plainPositive(string(num))
		if wantAmt {
			n, err := strconv.ParseInt(string(num), 10, 64)
			wantAmt = err == nil && n >= MinAmount && n <= MaxAmount
		}
		check(t, "amount", lit, fa.Err(), wantAmt)
		if wantAmt && strconv.FormatInt(amt, 10) != string(num) {
			t.Fatalf("amount %s read as %d", lit, amt)
		}

		fc := New(map[string]any{"v": v}, "p.")
		cur := fc.Currency("v")
		s, isStr := v.(string)
		wantCur := isStr && len(s) == 3 && upper(s[0]) && upper(s[1]) && upper(s[2])
		check(t, "currency", lit, fc.Err(), wantCur)
		if wantCur && cur != s {
			t.Fatalf("currency %s read as %q", lit, cur)
		}

		ft := New(map[string]any{"v": v}, "p.")
		txt := ft.Text("v", true, 64)
		wantTxt := isStr && s != "" && utf8.RuneCountInString(s) <= 64
		for _, r := range s {
			if unicode.IsControl(r) {
				wantTxt = false
			}
		}
		check(t, "text", lit, ft.Err(), wantTxt)
		if wantTxt && txt != s {
			t.Fatalf("text %s read as %q", lit, txt)
		}
	})
}

func plainPositive(s string) bool {
	if s == "" || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func upper(c byte) bool { return 'A' <= c && c <= 'Z' }

func check(t *testing.T, what string, lit []byte, err error, want bool) {
	t.Helper()
	switch {
	case want && err != nil:
		t.Fatalf("%s %s refused: %v", what, lit, err)
	case !want && err == nil:
		t.Fatalf("%s %s accepted", what, lit)
	case err != nil:
		var ve *Error
		if !errors.As(err, &ve) || ve.Field != "p.v" || !errors.Is(err, ErrInvalid) || len(err.Error()) > 200 {
			t.Fatalf("%s %s: refusal %v (%T) does not name p.v or is unbounded", what, lit, err, err)
		}
	}
}
