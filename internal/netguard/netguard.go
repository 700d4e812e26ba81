// Package netguard is the address rule of merchant-supplied URLs (README.md,
// "Webhook endpoints"): a webhook endpoint may not point the service at
// its own network. Only a globally reachable unicast address is allowed,
// not a loopback, private, link-local (cloud metadata at 169.254.169.254),
// CGNAT, multicast, unspecified, reserved, benchmarking or documentation
// one, nor an IPv6 address outside the global unicast range 2000::/3, also
// when written inside an IPv6 address of NAT64 or 6to4, unless the
// operator allows it. The rule is checked when the URL is written
// (CheckURL), and again when it is used: its scheme on every request
// (Transport), so that an http URL written while http was allowed is
// refused once it is not, and its address at every connection (Control,
// on the address the dialer actually connects to), so that a name that
// resolves elsewhere later, or differently for the relay than it did at
// creation, is refused then.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/idna"
)

// ErrForbidden: the address is one the rule refuses.
var ErrForbidden = errors.New("address not allowed")

// MaxURL is the longest endpoint URL, in bytes.
const MaxURL = 2048

// Rule is what the operator allows.
type Rule struct {
	// AllowHTTP admits http:// URLs (PAYSVC_NOTIFY_ALLOW_HTTP).
	AllowHTTP bool
	// AllowPrivate admits the addresses the rule refuses
	// (PAYSVC_NOTIFY_ALLOW_PRIVATE): a demo or test on one machine.
	AllowPrivate bool
}

// notGlobal is every range that IANA's special-purpose address
// registries mark as not globally reachable, with multicast, each with the
// words an error gives for it; the first match names an address. No
// merchant's receiver lives in these ranges, and the service's own network
// may: proxies in fake-IP mode answer names with 198.18.0.0/15, and some
// Kubernetes clusters number their pods in 240.0.0.0/4.
var notGlobal = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "address in 0.0.0.0/8"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},
	{netip.MustParsePrefix("::/128"), "unspecified address"},
	{netip.MustParsePrefix("::1/128"), "loopback address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "discard-only address"},
	{netip.MustParsePrefix("2001::/23"), "IETF protocol address"}, // Teredo's 2001::/32 among them
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},
	{netip.MustParsePrefix("3fff::/20"), "documentation address"},
	{netip.MustParsePrefix("5f00::/16"), "segment-routing address"},
	{netip.MustParsePrefix("fc00::/7"), "private (unique-local) address"},
	{netip.MustParsePrefix("fe80::/10"), "link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "multicast address"},
}

// globalUnicast is the only IPv6 range IANA allocates for global unicast
// (RFC 4291): outside it, an address is reserved, local or multicast, and
// no receiver on the Internet has one. The named ranges of notGlobal are
// found first, for their words.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// IPv6 addresses that a translator or tunnel delivers to the IPv4 address
// written inside them, so that [64:ff9b::a9fe:a9fe] reaches
// 169.254.169.254 on a network with NAT64: the IPv4 address is judged.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: the last 32 bits
	sixToFour = netip.MustParsePrefix("2002::/16")    // RFC 3056: bits 16 to 47
)

// Refused reports why ip is refused, or "" when it is a public address.
func Refused(ip netip.Addr) string {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return "not an IP address"
	}
	for _, r := range notGlobal {
		if r.prefix.Contains(ip) {
			return r.what
		}
	}
	v4, via := embeddedIPv4(ip)
	switch {
	case via != "":
		if why := Refused(v4); why != "" {
			return fmt.Sprintf("%s (%s, %s)", why, v4, via)
		}
	case ip.Is6() && !globalUnicast.Contains(ip):
		// The IPv4-compatible ::a.b.c.d among them: deprecated, and no
		// translator serves it.
		return "reserved IPv6 address (outside 2000::/3)"
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address an IPv6 address carries to a
// translator or tunnel, and which one; via is "" when it carries none.
func embeddedIPv4(ip netip.Addr) (v4 netip.Addr, via string) {
	b := ip.As16()
	switch {
	case !ip.Is6():
		return netip.Addr{}, ""
	case nat64.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), "through NAT64"
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), "through 6to4"
	}
	return netip.Addr{}, ""
}

// CheckIP refuses ip unless the rule allows it.
func (r Rule) CheckIP(ip netip.Addr) error {
	if r.AllowPrivate {
		return nil
	}
	if why := Refused(ip); why != "" {
		return fmt.Errorf("%s %s: %w", why, ip, ErrForbidden)
	}
	return nil
}

// Resolver looks a host name up (net.DefaultResolver's LookupNetIP).
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// DefaultResolver is the system's.
func DefaultResolver(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// lookupBudget bounds a name's resolution at creation.
const lookupBudget = 3 * time.Second

// CheckURL checks an endpoint URL as written and the addresses its host
// resolves to: CheckForm, then CheckName on the name it returns.
func (r Rule) CheckURL(ctx context.Context, raw string, resolve Resolver) error {
	name, err := r.CheckForm(raw)
	if err != nil || name == "" {
		return err
	}
	return r.CheckName(ctx, name, resolve)
}

// CheckForm checks an endpoint URL as written: absolute, https (or http
// when allowed), at most MaxURL bytes, no user-info, a host, and a host
// that is not an address the rule refuses. "localhost" and names under
// ".localhost" are loopback by definition (RFC 6761) and are refused. It
// returns the host name whose addresses remain to be judged (CheckName),
// "" when none do: the host is an IP address, or the rule allows private
// addresses. It looks nothing up, so its answer for a URL never changes.
// The error says what is wrong in words a client can act on; it never
// quotes user-info.
func (r Rule) CheckForm(raw string) (name string, err error) {
	if len(raw) > MaxURL {
		return "", fmt.Errorf("longer than %d characters", MaxURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("not a URL")
	}
	if err := r.checkScheme(u.Scheme); err != nil {
		return "", err
	}
	if u.User != nil || strings.Contains(u.Host, "@") {
		return "", errors.New("must not carry user-info (credentials) before the host")
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return "", errors.New("must be an absolute URL with a host")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "", errors.New("must not carry a fragment")
	}
	for _, c := range raw {
		if c < 0x21 || c == 0x7f {
			return "", errors.New("must not contain spaces or control characters")
		}
	}
	if p := u.Port(); p != "" {
		if n, ok := portNumber(p); !ok || n == 0 {
			return "", errors.New("has an invalid port")
		}
	}
	if r.AllowPrivate {
		return "", nil
	}
	host := dialedHost(u.Hostname())
	if ip, err := netip.ParseAddr(host); err == nil {
		return "", r.CheckIP(ip)
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "", fmt.Errorf("loopback name %s: %w", host, ErrForbidden)
	}
	// No top-level domain is numeric, so a host such as 0177.0.0.1,
	// 2130706433 or 0x7f.1 is an IPv4 address in a form that resolvers
	// read differently (inet_aton takes each as 127.0.0.1): refused.
	if last := host[strings.LastIndexByte(host, '.')+1:]; strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", fmt.Errorf("host %s: an IPv4 address must be written as four decimal numbers: %w", host, ErrForbidden)
	}
	return host, nil
}

// checkScheme refuses a scheme other than https, and http unless the rule
// allows it.
func (r Rule) checkScheme(scheme string) error {
	switch {
	case scheme == "https":
	case scheme == "http" && r.AllowHTTP:
	case scheme == "http":
		return errors.New("must be https (http is allowed only with PAYSVC_NOTIFY_ALLOW_HTTP=true)")
	default:
		return errors.New("must be an absolute https URL")
	}
	return nil
}

// dialedHost is the host the relay connects to for a URL's hostname, in
// lower case without a final dot: net/http dials a name that is not ASCII
// in its IDNA form (UTS #46, as idna.Lookup writes it), where fullwidth
// "ｌｏｃａｌｈｏｓｔ" is localhost, "１２７.０.０.１" is 127.0.0.1 and
// "bücher.example" is xn--bcher-kva.example; a name it cannot convert is
// dialled as written. Judging any other spelling would judge a host the
// relay does not connect to.
func dialedHost(hostname string) string {
	host := hostname
	if !isASCII(host) {
		if a, err := idna.Lookup.ToASCII(host); err == nil {
			host = a
		}
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// CheckName refuses a host name that does not resolve, or resolves to an
// address the rule refuses. Its answer may change from one call to the
// next: the name's owner decides what it resolves to.
func (r Rule) CheckName(ctx context.Context, name string, resolve Resolver) error {
	if resolve == nil {
		resolve = DefaultResolver
	}
	lctx, cancel := context.WithTimeout(ctx, lookupBudget)
	defer cancel()
	ips, err := resolve(lctx, name)
	if err != nil || len(ips) == 0 {
		return fmt.Errorf("host %s does not resolve", name)
	}
	for _, ip := range ips {
		if err := r.CheckIP(ip); err != nil {
			return fmt.Errorf("host %s resolves to a %w", name, err)
		}
	}
	return nil
}

func portNumber(p string) (int, bool) {
	if len(p) > 5 {
		return 0, false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= 65535
}

// Control is a net.Dialer Control function that refuses to connect to an
// address the rule refuses. It sees the address after resolution, once
// per address tried, so that no name can lead the dialer around the rule.
func (r Rule) Control(network, address string, _ syscall.RawConn) error {
	if r.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, ErrForbidden)
	}
	if err := r.CheckIP(ap.Addr()); err != nil {
		return fmt.Errorf("dial refused: %w", err)
	}
	return nil
}

// Dialer returns a dialer whose every connection passes the rule.
func (r Rule) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: r.Control}
}

// Transport returns next with the rule's scheme checked on every request
// it sends, as Control checks the address at every connection: a URL
// written while http was allowed is refused once it is not, instead of
// carrying signed events in plaintext for as long as it is stored.
func (r Rule) Transport(next http.RoundTripper) http.RoundTripper {
	return schemeGuard{rule: r, next: next}
}

type schemeGuard struct {
	rule Rule
	next http.RoundTripper
}

func (g schemeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := g.rule.checkScheme(req.URL.Scheme); err != nil {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, even when it refuses
		}
		return nil, fmt.Errorf("%s refused: %w", req.URL.Scheme, err)
	}
	return g.next.RoundTrip(req)
}
