package netguard_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/paysvc/paysvc/internal/netguard"
)

// noDNS fails the test if the rule tries to resolve a name: these tests
// must never need DNS.
func noDNS(t *testing.T) netguard.Resolver {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		t.Errorf("looked %s up", host)
		return nil, errors.New("no DNS in tests")
	}
}

// fixed answers every name with addrs, as a resolver that changed its
// mind would.
func fixed(addrs ...string) netguard.Resolver {
	return func(context.Context, string) ([]netip.Addr, error) {
		out := make([]netip.Addr, len(addrs))
		for i, a := range addrs {
			out[i] = netip.MustParseAddr(a)
		}
		return out, nil
	}
}

func TestCheckURLRefusesInternalAddresses(t *testing.T) {
	t.Parallel()
	strict := netguard.Rule{AllowHTTP: true}
	for _, u := range []string{
		"http://127.0.0.1/hook", "http://127.8.9.10:8080/", "http://localhost/", "http://LOCALHOST./x",
		"http://api.localhost/", "http://[::1]/", "http://10.0.0.1/", "http://172.16.0.1/", "http://172.31.255.255/",
		"http://192.168.1.1/", "http://169.254.169.254/latest/meta-data/", "http://100.64.0.1/", "http://0.0.0.0/",
		"http://[::]/", "http://[fe80::1]/", "http://[fc00::1]/", "http://[fd12:3456::1]/", "http://224.0.0.1/",
		"http://[ff02::1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/", "http://255.255.255.255/",
		"http://0.1.2.3/",
		// IPv4 inside IPv6: NAT64, 6to4, IPv4-compatible; a local NAT64
		// prefix and site-local.
		"http://[64:ff9b::a9fe:a9fe]/", "http://[64:ff9b::10.0.0.1]/", "http://[64:ff9b::127.0.0.1]/",
		"http://[2002:7f00:1::1]/", "http://[2002:a9fe:a9fe::]/", "http://[2002:c0a8:101:1::1]/",
		// IPv4 addresses in the forms inet_aton reads as 127.0.0.1.
		"http://0177.0.0.1/", "http://2130706433/", "http://0x7f.1/", "http://127.1/", "http://0x7f000001/",
		"http://[::127.0.0.1]/", "http://[::10.1.2.3]/", "http://[64:ff9b:1::cb00:7109]/", "http://[fec0::1]/",
		// Not globally reachable: IETF protocol, documentation,
		// benchmarking (fake-IP proxies), reserved; discard-only, Teredo
		// and the other IETF protocol ranges, segment routing.
		"http://192.0.0.170/", "http://192.0.2.1/", "http://198.51.100.1/", "http://203.0.113.9/",
		"http://198.18.0.1/", "http://198.19.255.254/", "http://240.0.0.1/", "http://[64:ff9b::c612:1]/",
		"http://[100::1]/", "http://[2001::a9fe:a9fe]/", "http://[2001:db8::1]/", "http://[3fff::1]/", "http://[5f00::1]/",
		// IPv6 outside 2000::/3: reserved (the IPv4-translated form of
		// SIIT among them), or not yet allocated.
		"http://[::ffff:0:a00:1]/", "http://[::ffff:0:101:101]/", "http://[1::1]/", "http://[4000::1]/", "http://[e000::1]/",
		// Names that net/http dials in their IDNA form, which is loopback.
		"http://ｌｏｃａｌｈｏｓｔ/", "http://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ:8080/", "http://１２７.０.０.１/", "http://127。0。0。1/", "http://①②⑦.0.0.1/",
	} {
		err := strict.CheckURL(context.Background(), u, noDNS(t))
		if !errors.Is(err, netguard.ErrForbidden) {
			t.Errorf("%s: %v, want refused as internal", u, err)
		}
	}
	// A name is refused for what it resolves to.
	if err := strict.CheckURL(context.Background(), "https://hooks.example.test/", fixed("1.1.1.1", "10.1.2.3")); !errors.Is(err, netguard.ErrForbidden) {
		t.Errorf("a name resolving to a private address: %v", err)
	}
	// On an IPv6-only network, DNS64 answers a name whose A record is
	// 10.1.2.3 with 64:ff9b::a01:203, which NAT64 delivers to 10.1.2.3.
	if err := strict.CheckURL(context.Background(), "https://hooks.example.test/", fixed("64:ff9b::a01:203")); !errors.Is(err, netguard.ErrForbidden) ||
		!strings.Contains(err.Error(), "private address (10.1.2.3, through NAT64)") {
		t.Errorf("a name DNS64 maps to a private address: %v", err)
	}
	if err := strict.CheckURL(context.Background(), "https://hooks.example.test/", fixed("1.1.1.1", "2606:4700::1111")); err != nil {
		t.Errorf("a name resolving to a public address: %v", err)
	}
}

// A name that is not ASCII is looked up, and judged, in the IDNA form
// net/http dials.
func TestCheckURLJudgesTheIDNAForm(t *testing.T) {
	t.Parallel()
	var asked []string
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		asked = append(asked, host)
		return []netip.Addr{netip.MustParseAddr("1.1.1.1")}, nil
	}
	for _, u := range []string{"https://bücher.example/hook", "https://BÜCHER.example./hook", "https://xn--bcher-kva.example/hook"} {
		if err := (netguard.Rule{}).CheckURL(context.Background(), u, resolve); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	if want := []string{"xn--bcher-kva.example", "xn--bcher-kva.example", "xn--bcher-kva.example"}; !slices.Equal(asked, want) {
		t.Errorf("looked up %q, want %q", asked, want)
	}
}

func TestCheckURLShape(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rule netguard.Rule
		url  string
		ok   bool
	}{
		{netguard.Rule{AllowPrivate: true}, "https://127.0.0.1:9/x", true},
		{netguard.Rule{AllowPrivate: true}, "http://127.0.0.1:9/x", false},
		{netguard.Rule{AllowPrivate: true, AllowHTTP: true}, "http://127.0.0.1:9/x", true},
		{netguard.Rule{AllowPrivate: true}, "https://user:pw@127.0.0.1/", false},
		{netguard.Rule{AllowPrivate: true}, "https://user@127.0.0.1/", false},
		{netguard.Rule{AllowPrivate: true}, "ftp://127.0.0.1/", false},
		{netguard.Rule{AllowPrivate: true}, "/relative", false},
		{netguard.Rule{AllowPrivate: true}, "https://", false},
		{netguard.Rule{AllowPrivate: true}, "https:opaque", false},
		{netguard.Rule{AllowPrivate: true}, "https://127.0.0.1/a b", false},
		{netguard.Rule{AllowPrivate: true}, "https://127.0.0.1/#frag", false},
		{netguard.Rule{AllowPrivate: true}, "https://127.0.0.1:99999/", false},
		{netguard.Rule{AllowPrivate: true}, "https://127.0.0.1/" + strings.Repeat("a", netguard.MaxURL-len("https://127.0.0.1/")), true},
		{netguard.Rule{AllowPrivate: true}, "https://127.0.0.1/" + strings.Repeat("a", netguard.MaxURL-len("https://127.0.0.1/")+1), false},
		{netguard.Rule{}, "https://1.1.1.1/hook", true},
		{netguard.Rule{}, "https://[2606:4700::1111]/hook", true},
		{netguard.Rule{}, "https://1.1.1.1:8443/hook", true},
		{netguard.Rule{}, "https://[64:ff9b::101:101]/hook", true}, // 1.1.1.1 through NAT64
		{netguard.Rule{}, "https://[2002:101:101::1]/hook", true},  // and through 6to4
	} {
		err := c.rule.CheckURL(context.Background(), c.url, noDNS(t))
		if (err == nil) != c.ok {
			t.Errorf("%+v %.60q: %v, want ok=%v", c.rule, c.url, err, c.ok)
		}
	}
}

func TestControlRefusesTheDialledAddress(t *testing.T) {
	t.Parallel()
	strict := netguard.Rule{}
	for _, a := range []string{"127.0.0.1:80", "[::1]:443", "10.0.0.1:80", "169.254.169.254:80", "100.64.0.1:80", "0.0.0.0:80", "[::ffff:192.168.1.1]:80",
		"[64:ff9b::a9fe:a9fe]:80", "[2002:a00:1::1]:443", "[::7f00:1]:80", "198.18.0.1:80", "240.1.2.3:443", "[2001:0:4136:e378::1]:443"} {
		if err := strict.Control("tcp", a, nil); !errors.Is(err, netguard.ErrForbidden) {
			t.Errorf("%s: %v", a, err)
		}
	}
	if err := strict.Control("tcp", "1.1.1.1:443", nil); err != nil {
		t.Errorf("public: %v", err)
	}
	if err := (netguard.Rule{AllowPrivate: true}).Control("tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("allowed private: %v", err)
	}
}

func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://a.b/", "http://127.0.0.1/", "https://[::1]:80/", "https://u@h/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = netguard.Rule{}.CheckURL(context.Background(), s, fixed("10.0.0.1"))
		// Allowing private addresses needs no resolver.
		_ = netguard.Rule{AllowPrivate: true, AllowHTTP: true}.CheckURL(context.Background(), s, nil)
	})
}
