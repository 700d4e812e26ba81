package db

import (
	"strings"
	"testing"
)

func TestCheckDSNForm(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		want string // "" for accepted
	}{
		{"root:@tcp(127.0.0.1:3306)/paysvc?parseTime=true&loc=UTC", ""},
		{"paysvc:pa55@unix(/run/mysqld/mysqld.sock)/paysvc", ""},
		{"u:p://odd@tcp(h:3306)/db", ""}, // "://" inside a password
		{"mysql://paysvc:s3cret-pw@db:3306/paysvc?tls=true", "write it as paysvc:PASSWORD@tcp(db:3306)/paysvc?tls=true"},
		{"mariadb://app@db.internal/pay", "write it as app@tcp(db.internal:3306)/pay"},
		{"mysql://[::1]:3307/pay", "write it as tcp([::1]:3307)/pay"},
		{"mysql://", "write it as " + DSNForm},
		// Unescaped '/', '?', '#' in a password: nothing after them is shown.
		{"mysql://u:s3cret/odd@db/pay", "write it as " + DSNForm},
		{"mysql://u:12?s3cret@db/pay", "write it as " + DSNForm},
		{"mysql://u:12#s3cret@db/pay", "write it as " + DSNForm},
		{"mysql://u:s3@cret@db/pay", "write it as u:PASSWORD@tcp(db:3306)/pay"},
	} {
		err := CheckDSNForm(tc.dsn)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckDSNForm(%q) = %v, want nil", tc.dsn, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckDSNForm(%q) = %v, want an error with %q", tc.dsn, err, tc.want)
		case err != nil && (strings.Contains(err.Error(), "s3") || strings.Contains(err.Error(), "cret")):
			t.Errorf("CheckDSNForm(%q) = %v: the password leaked", tc.dsn, err)
		}
	}
}

// TestConfigRefusesURLDSN: db.Config, which every command's connection
// goes through, says the same.
func TestConfigRefusesURLDSN(t *testing.T) {
	_, err := Config("mysql://paysvc:s3cret-pw@db:3306/paysvc")
	if err == nil || !strings.Contains(err.Error(), "paysvc:PASSWORD@tcp(db:3306)/paysvc") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Config(URL) = %v", err)
	}
}
