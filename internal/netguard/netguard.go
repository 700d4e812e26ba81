// Package netguard is the address rule of merchant-supplied URLs (README.md,
// "Webhook endpoints"): a webhook endpoint may not point the service at
// its own network — loopback, private, link-local (cloud metadata at
// 169.254.169.254), CGNAT, multicast or unspecified addresses — unless the
// operator allows it. The rule is checked twice: when the URL is written
// (CheckURL), and at every connection (Control, on the address the dialer
// actually connects to), so that a name that resolves elsewhere later, or
// differently for the relay than it did at creation, is refused then.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
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

// cgnat is RFC 6598's shared address space; netip has no predicate for it.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Refused reports why ip is refused, or "" when it is a public address.
func Refused(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "not an IP address"
	case ip.IsUnspecified():
		return "unspecified address"
	case ip.IsLoopback():
		return "loopback address"
	case ip.IsPrivate():
		return "private address"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local address"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast address"
	case cgnat.Contains(ip):
		return "shared (CGNAT) address"
	case ip.Is4() && ip.As4()[0] == 0:
		return "address in 0.0.0.0/8"
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast address"
	}
	return ""
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

// CheckURL checks an endpoint URL as written: absolute, https (or http
// when allowed), at most MaxURL bytes, no user-info, a host, and a host
// that is not — and does not resolve to — an address the rule refuses.
// "localhost" and names under ".localhost" are loopback by definition
// (RFC 6761) and are refused without a lookup. The error says what is
// wrong in words a client can act on; it never quotes user-info.
func (r Rule) CheckURL(ctx context.Context, raw string, resolve Resolver) error {
	if len(raw) > MaxURL {
		return fmt.Errorf("longer than %d characters", MaxURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && r.AllowHTTP:
	case u.Scheme == "http":
		return errors.New("must be https (http is allowed only with PAYSVC_NOTIFY_ALLOW_HTTP=true)")
	default:
		return errors.New("must be an absolute https URL")
	}
	if u.User != nil || strings.Contains(u.Host, "@") {
		return errors.New("must not carry user-info (credentials) before the host")
	}
	if u.Opaque != "" || u.Host == "" || u.Hostname() == "" {
		return errors.New("must be an absolute URL with a host")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return errors.New("must not carry a fragment")
	}
	for _, c := range raw {
		if c < 0x21 || c == 0x7f {
			return errors.New("must not contain spaces or control characters")
		}
	}
	if p := u.Port(); p != "" {
		if n, ok := portNumber(p); !ok || n == 0 {
			return errors.New("has an invalid port")
		}
	}
	if r.AllowPrivate {
		return nil
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return r.CheckIP(ip)
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return fmt.Errorf("loopback name %s: %w", host, ErrForbidden)
	}
	if resolve == nil {
		resolve = DefaultResolver
	}
	lctx, cancel := context.WithTimeout(ctx, lookupBudget)
	defer cancel()
	ips, err := resolve(lctx, host)
	if err != nil || len(ips) == 0 {
		return fmt.Errorf("host %s does not resolve", host)
	}
	for _, ip := range ips {
		if err := r.CheckIP(ip); err != nil {
			return fmt.Errorf("host %s resolves to a %w", host, err)
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
