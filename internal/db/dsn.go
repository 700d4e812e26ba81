package db

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// DSNForm is the form of a DSN, as an example.
const DSNForm = "user:password@tcp(host:3306)/dbname"

// CheckDSNForm refuses a DSN written as a URL (mysql://user:pw@host/db),
// the form most other tools take. The driver reads everything before the
// first '/' as user, password and network, and would answer "default addr
// for network 'host' unknown", which names neither the mistake nor the
// fix; this error names both, and spells the same settings in the driver's
// form, the password left out.
func CheckDSNForm(dsn string) error {
	scheme, _, isURL := strings.Cut(dsn, "://")
	if !isURL || strings.ContainsAny(scheme, "@:/()") {
		return nil
	}
	want := DSNForm
	// A password with an unescaped '/', '?' or '#' ends the URL's
	// authority early, and the rest of it would be read as the path, the
	// query or the fragment: an '@' there means exactly that, and then
	// only the general form is shown.
	if u, err := url.Parse(dsn); err == nil && u.Host != "" && !strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") {
		want = driverForm(u)
	}
	return fmt.Errorf("is a URL (%s://...), not a go-sql-driver DSN: write it as %s", scheme, want)
}

// driverForm writes u's user, host, database and parameters in the
// driver's form, with PASSWORD in place of any password.
func driverForm(u *url.URL) string {
	var b strings.Builder
	if u.User != nil {
		b.WriteString(u.User.Username())
		if _, set := u.User.Password(); set {
			b.WriteString(":PASSWORD")
		}
		b.WriteByte('@')
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "3306")
	}
	fmt.Fprintf(&b, "tcp(%s)/%s", host, strings.TrimPrefix(u.Path, "/"))
	if u.RawQuery != "" {
		b.WriteString("?" + u.RawQuery)
	}
	return b.String()
}
