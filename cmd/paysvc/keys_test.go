package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/cli"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// paysvcCmd runs one command in-process against dsn and returns its
// stdout, the error line main would print, and the exit code.
func paysvcCmd(t *testing.T, dsn string, args ...string) (stdout, errLine string, code int) {
	t.Helper()
	var out, stderr bytes.Buffer
	err := run(context.Background(), args, rtEnv("PAYSVC_DSN", dsn), &out, &stderr)
	if err != nil {
		errLine = err.Error()
	}
	return out.String(), errLine, cli.Status(err)
}

var (
	issuedLine = regexp.MustCompile(`^id (key_[0-9A-Z]{26}) prefix (sk_[0-9A-Za-z]{4}) expires (never|\S+Z)$`)
	keyLine    = regexp.MustCompile(`^sk_[0-9A-Za-z]{40}$`)
)

// issue runs a command that prints a new key and returns the key and its
// id, checking the two lines.
func issue(t *testing.T, dsn string, args ...string) (key, id, expires string) {
	t.Helper()
	out, errLine, code := paysvcCmd(t, dsn, args...)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 || !keyLine.MatchString(lines[0]) {
		t.Fatalf("%v: exit %d (%s), output %q", args, code, errLine, out)
	}
	m := issuedLine.FindStringSubmatch(lines[1])
	if m == nil || m[2] != lines[0][:7] {
		t.Fatalf("%v: second line %q", args, lines[1])
	}
	return lines[0], m[1], m[3]
}

func TestMerchantAndKeyCommands(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"merchants", "create", "acme", "--name", "Acme Ltd"}, "created acme\n"},
		{[]string{"merchants", "create", "--name", "Bolt", "bolt"}, "created bolt\n"},
	}
	for _, st := range steps {
		if out, errLine, code := paysvcCmd(t, d.DSN, st.args...); code != 0 || out != st.want {
			t.Fatalf("%v: exit %d (%s), printed %q, want %q", st.args, code, errLine, out, st.want)
		}
	}
	out, _, code := paysvcCmd(t, d.DSN, "merchants", "list")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 ||
		!regexp.MustCompile(`^id acme created \S+Z name "Acme Ltd"$`).MatchString(lines[0]) || !strings.HasPrefix(lines[1], "id bolt ") {
		t.Fatalf("merchants list: exit %d\n%s", code, out)
	}

	key, id, expires := issue(t, d.DSN, "keys", "create", "--merchant", "acme")
	if expires != "never" {
		t.Fatalf("a key without --expires-in expires %s", expires)
	}
	before := time.Now()
	_, _, expires = issue(t, d.DSN, "keys", "create", "--merchant", "acme", "--expires-in", "90m")
	if at, err := time.Parse(time.RFC3339, expires); err != nil || at.Before(before.Add(89*time.Minute)) || at.After(time.Now().Add(91*time.Minute)) {
		t.Fatalf("--expires-in 90m: expires %s (%v)", expires, err)
	}
	rolled, rolledID, _ := issue(t, d.DSN, "keys", "roll", id, "--expires-in", "0")
	if rolled == key || rolledID == id {
		t.Fatal("roll printed the old key")
	}
	if out, errLine, code := paysvcCmd(t, d.DSN, "keys", "revoke", rolledID); code != 0 || out != "revoked "+rolledID+"\n" {
		t.Fatalf("revoke: exit %d (%s) %q", code, errLine, out)
	}
	// Revoking again changes nothing and succeeds.
	if out, _, code := paysvcCmd(t, d.DSN, "keys", "revoke", rolledID); code != 0 || out != "revoked "+rolledID+"\n" {
		t.Fatalf("revoke again: exit %d %q", code, out)
	}

	out, _, code = paysvcCmd(t, d.DSN, "keys", "list")
	if code != 0 || strings.Contains(out, key) || strings.Contains(out, rolled) || strings.Contains(out, key[7:]) {
		t.Fatalf("keys list: exit %d, or it shows a key:\n%s", code, out)
	}
	listed := regexp.MustCompile(`(?m)^id (key_\w{26}) merchant acme prefix (sk_\w{4}) created \S+Z expires (\S+) revoked (\S+) last_used never$`).
		FindAllStringSubmatch(out, -1)
	if len(listed) != 3 {
		t.Fatalf("keys list: want 3 lines of the documented form:\n%s", out)
	}
	for _, l := range listed {
		switch l[1] {
		case id:
			if l[2] != key[:7] || l[3] == "never" || l[4] != "never" {
				t.Errorf("rolled-over key listed as %q", l[0])
			}
		case rolledID:
			if l[2] != rolled[:7] || l[3] != "never" || l[4] == "never" {
				t.Errorf("revoked key listed as %q", l[0])
			}
		}
	}
	if out, _, code := paysvcCmd(t, d.DSN, "keys", "list", "--merchant", "bolt"); code != 0 || out != "" {
		t.Fatalf("keys of bolt: exit %d %q", code, out)
	}
	if out, _, code := paysvcCmd(t, d.DSN, "keys", "create", "-h"); code != 0 || !strings.Contains(out, "paysvc keys create") {
		t.Fatalf("keys create -h: exit %d\n%s", code, out)
	}
}

// Bad input is exit 1 with one line naming why and nothing on stdout;
// no database is exit 2, within the command's short wait.
func TestMerchantAndKeyCommandRefusals(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	if _, _, code := paysvcCmd(t, d.DSN, "merchants", "create", "acme"); code != 0 {
		t.Fatal("create acme")
	}
	_, id, _ := issue(t, d.DSN, "keys", "create", "--merchant", "acme")
	const unknownID = "key_01JAAAAAAAAAAAAAAAAAAAAAAA"
	tests := []struct {
		args    []string
		mention string
	}{
		{[]string{"merchants", "create", "acme"}, "merchant acme exists"},
		{[]string{"merchants", "create", "a.b"}, `merchant id "a.b": must be 1-64 characters`},
		{[]string{"merchants", "create"}, "want one merchant id"},
		{[]string{"merchants", "create", "x", "--name", "tab\there"}, "name: must not contain control characters"},
		{[]string{"merchants", "list", "extra"}, `unexpected argument "extra"`},
		{[]string{"merchants"}, "want create or list"},
		{[]string{"keys"}, "want create, list, roll or revoke"},
		{[]string{"keys", "create"}, "--merchant is required"},
		{[]string{"keys", "create", "--merchant", "ghost"}, "merchant ghost not found"},
		{[]string{"keys", "create", "--merchant", "bad id"}, `merchant id "bad id"`},
		{[]string{"keys", "create", "--merchant", "acme", "--expires-in", "3x"}, `--expires-in: "3x" is not a duration`},
		{[]string{"keys", "create", "--merchant", "acme", "--expires-in", "-1s"}, "must not be negative"},
		{[]string{"keys", "create", "--merchant", "acme", "--expires-in", "0"}, "never works"},
		{[]string{"keys", "create", "--merchant", "acme", "--frob"}, "flag provided but not defined: -frob"},
		{[]string{"keys", "list", "--merchant", "ghost"}, "merchant ghost not found"},
		{[]string{"keys", "roll", "key_bad"}, `key id "key_bad": must be key_ followed by 26 characters`},
		{[]string{"keys", "roll", unknownID}, "key " + unknownID + " not found"},
		{[]string{"keys", "roll", id, "--expires-in", "soon"}, `"soon" is not a duration`},
		{[]string{"keys", "roll"}, "want one key id"},
		{[]string{"keys", "revoke", unknownID}, "key " + unknownID + " not found"},
		{[]string{"keys", "revoke", id, id}, "want one key id"},
	}
	for _, tc := range tests {
		out, errLine, code := paysvcCmd(t, d.DSN, tc.args...)
		if code != 1 || !strings.Contains(errLine, tc.mention) || strings.ContainsAny(errLine, "\r\n") || out != "" {
			t.Errorf("%q: exit %d, error %q, stdout %q; want exit 1, one line mentioning %q, no output", tc.args, code, errLine, out, tc.mention)
		}
	}
	if n := d.Count(t, `SELECT COUNT(*) FROM api_keys`); n != 1 {
		t.Errorf("the refusals left %d keys, want the one created", n)
	}

	// Nothing listens on port 1 (refused at once); the proxy in
	// Blackhole answers nothing at all, so only the command's own wait
	// ends it.
	proxy := dbtest.NewProxy(t, d.Config.Addr)
	proxy.Set(dbtest.Blackhole)
	for _, dsn := range []string{"root:@tcp(127.0.0.1:1)/paysvc", proxy.DSN(d)} {
		for _, args := range [][]string{
			{"merchants", "create", "x"}, {"merchants", "list"},
			{"keys", "create", "--merchant", "acme"}, {"keys", "list"}, {"keys", "roll", id}, {"keys", "revoke", id},
		} {
			t.Run("no database/"+strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				out, errLine, code := paysvcCmd(t, dsn, args...)
				took := time.Since(began)
				if code != 2 || !strings.Contains(errLine, "not reachable") || strings.ContainsAny(errLine, "\r\n") || out != "" {
					t.Errorf("exit %d, error %q, stdout %q; want exit 2, one line", code, errLine, out)
				}
				if took > commandDBWait+5*time.Second {
					t.Errorf("took %v", took)
				}
			})
		}
	}
}
