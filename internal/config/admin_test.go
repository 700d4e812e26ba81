package config

import (
	"strings"
	"testing"
)

const (
	adminKeyA = "op_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	adminKeyB = "op_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
)

func TestAdminKeys(t *testing.T) {
	short := strings.Repeat("s", MinAdminKeyLen-1)
	apiKey := strings.Repeat("k", 40)
	for _, tc := range []struct {
		name, value string
		want        []string
		err         string // a part of the error; "" for none
	}{
		{"unset", "", nil, ""},
		{"one", adminKeyA, []string{adminKeyA}, ""},
		{"two, spaces trimmed", " " + adminKeyA + " , " + adminKeyB, []string{adminKeyA, adminKeyB}, ""},
		{"exactly the minimum", strings.Repeat("m", MinAdminKeyLen), []string{strings.Repeat("m", MinAdminKeyLen)}, ""},
		{"short", adminKeyA + "," + short, nil, "PAYSVC_ADMIN_KEYS: entry 2 is shorter than 32 characters"},
		{"empty entry", adminKeyA + ",,", nil, "PAYSVC_ADMIN_KEYS: entry 2 is empty"},
		{"duplicate", adminKeyA + "," + adminKeyA, nil, "PAYSVC_ADMIN_KEYS: entry 2 repeats entry 1"},
		{"merchant key", apiKey, nil, "PAYSVC_ADMIN_KEYS: entry 1 is also a key of PAYSVC_API_KEYS"},
		{"control character", strings.Repeat("x", 33) + "\x01y", nil, "PAYSVC_ADMIN_KEYS: entry 1 must be printable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(env(map[string]string{envAdminKeys: tc.value, envAPIKeys: "acme:" + apiKey}))
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one starting %q", err, tc.err)
				}
				for _, k := range []string{short, apiKey, adminKeyA} {
					if strings.Contains(err.Error(), k) {
						t.Errorf("error %q shows a key", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(c.AdminKeys, ",") != strings.Join(tc.want, ",") {
				t.Errorf("AdminKeys = %q, want %q", c.AdminKeys, tc.want)
			}
		})
	}
}
