package netpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestDeriveDefaultsAndAllowInsideDeny(t *testing.T) {
	p, err := Derive(Input{
		Allow:     []Rule{{pfx("10.78.0.0/24"), "a:1"}},
		Deny:      []Rule{{pfx("198.18.5.0/24"), "a:2"}},
		Resolvers: []netip.Addr{netip.MustParseAddr("10.255.255.53"), netip.MustParseAddr("10.255.255.53")},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := string(p.Canonical())
	want := `lazaret-network-policy v1
ipv6 disabled
deny 10.0.0.0/8
deny 100.64.0.0/10
deny 169.254.0.0/16
deny 172.16.0.0/12
deny 192.168.0.0/16
deny 198.18.5.0/24
allow 10.78.0.0/24
allow 10.255.255.53/32
dns 10.255.255.53
`
	if got != want {
		t.Fatalf("canonical:\n%s\nwant:\n%s", got, want)
	}
	back, err := Decode(p.Canonical())
	if err != nil || back.Digest() != p.Digest() {
		t.Fatalf("round trip: %v", err)
	}
}

func TestConflictsAndBadPrefixes(t *testing.T) {
	_, err := Derive(Input{Allow: []Rule{{pfx("10.0.0.0/8"), "config.toml:7"}}})
	var ce *ConflictError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "config.toml:7") || !strings.Contains(err.Error(), "built-in default deny") {
		t.Fatalf("default conflict: %v", err)
	}
	_, err = Derive(Input{Allow: []Rule{{pfx("198.18.0.0/15"), "x:1"}}, Deny: []Rule{{pfx("198.18.0.0/15"), "x:2"}}})
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "x:1") || !strings.Contains(err.Error(), "x:2") {
		t.Fatalf("configured conflict: %v", err)
	}
	if _, err := Derive(Input{Deny: []Rule{{netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 8), "y:3"}}}); err == nil || !strings.Contains(err.Error(), "write 10.0.0.0/8") {
		t.Fatalf("host bits: %v", err)
	}
	if _, err := Derive(Input{Deny: []Rule{{pfx("fd00::/8"), "y:4"}}}); err == nil || !strings.Contains(err.Error(), "IPv4") {
		t.Fatalf("ipv6: %v", err)
	}
	if _, err := Derive(Input{Resolvers: []netip.Addr{netip.MustParseAddr("::1")}}); err == nil {
		t.Fatal("ipv6 resolver accepted")
	}
}

func TestDecodeRefusesNonCanonical(t *testing.T) {
	p, _ := Derive(Input{})
	good := string(p.Canonical())
	for name, bad := range map[string]string{
		"newer":    strings.Replace(good, "v1", "v3", 1),
		"unknown":  good + "route 1.2.3.0/24\n",
		"unsorted": strings.Replace(good, "deny 10.0.0.0/8\ndeny 100.64.0.0/10\n", "deny 100.64.0.0/10\ndeny 10.0.0.0/8\n", 1),
		"ipv6":     strings.Replace(good, "ipv6 disabled", "ipv6 enabled", 1),
		"empty":    "",
	} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestDigestStable(t *testing.T) {
	a, _ := Derive(Input{Allow: []Rule{{pfx("10.1.0.0/16"), "a"}, {pfx("10.2.0.0/16"), "b"}}})
	b, _ := Derive(Input{Allow: []Rule{{pfx("10.2.0.0/16"), "z"}, {pfx("10.1.0.0/16"), "y"}}})
	if a.Digest() != b.Digest() {
		t.Fatal("digest depends on order or sources")
	}
	c, _ := Derive(Input{Allow: []Rule{{pfx("10.1.0.0/16"), "a"}}})
	if a.Digest() == c.Digest() {
		t.Fatal("different policies share a digest")
	}
}

func TestFailFastExcludesEveryPermittedDestination(t *testing.T) {
	p, err := Derive(Input{Allow: []Rule{{Prefix: netip.MustParsePrefix("10.78.0.0/24"), Source: "t"}}, Resolvers: []netip.Addr{netip.MustParseAddr("10.255.255.53")}})
	if err != nil {
		t.Fatal(err)
	}
	helper := netip.MustParsePrefix("10.0.2.0/24")
	ff := p.FailFast(helper)
	inFF := func(a netip.Addr) bool {
		for _, q := range ff {
			if q.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, a := range []string{"10.78.0.5", "10.0.2.2", "10.0.2.3", "10.255.255.53", "198.18.0.1", "8.8.8.8"} {
		if inFF(netip.MustParseAddr(a)) {
			t.Errorf("%s is permitted but lies in the fail-fast space", a)
		}
	}
	for _, a := range []string{"10.0.0.1", "10.77.0.2", "10.78.1.1", "10.255.255.52", "172.16.9.9", "192.168.1.1", "169.254.169.254", "100.64.0.1"} {
		if !inFF(netip.MustParseAddr(a)) {
			t.Errorf("%s is denied but not in the fail-fast space", a)
		}
	}
	// Overlap-free and minimal: 10/8 minus a /24, a /24 and a /32 → 16+16+24 prefixes at most.
	if len(ff) > 4+16+16+24 {
		t.Errorf("%d prefixes", len(ff))
	}
	for i, a := range ff {
		for j, b := range ff {
			if i != j && a.Overlaps(b) {
				t.Fatalf("%s overlaps %s", a, b)
			}
		}
	}
}
