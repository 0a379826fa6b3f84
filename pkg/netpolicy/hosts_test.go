package netpolicy

import (
	"encoding/hex"
	"errors"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestParseHostRule(t *testing.T) {
	good := map[string]HostRule{
		"api.example.test":             {"api.example.test", 0},
		" API.Example.Test. ":          {"api.example.test", 0},
		"*.cdn.example.test":           {"*.cdn.example.test", 0},
		"git.example.test:22":          {"git.example.test", 22},
		"*.Example.test.:443":          {"*.example.test", 443},
		"localhost":                    {"localhost", 0},
		"xn--bcher-kva.example":        {"xn--bcher-kva.example", 0},
		"a-b.c-d.example:65535":        {"a-b.c-d.example", 65535},
		"123.example.test":             {"123.example.test", 0},
		strings.Repeat("a", 63) + ".t": {strings.Repeat("a", 63) + ".t", 0},
	}
	for in, want := range good {
		got, err := ParseHostRule(in)
		if err != nil || got != want {
			t.Errorf("ParseHostRule(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseHostRule(got.String()); err != nil || back != got {
			t.Errorf("%q does not round-trip through String: %v, %v", in, back, err)
		}
	}
	bad := map[string]string{
		"":                                     "empty",
		"*":                                    "bare",
		"*.":                                   "bare",
		"*.*.example.test":                     "label",
		"a*.example.test":                      "only as the whole first label",
		"api.*.example.test":                   "only as the whole first label",
		"10.0.0.1":                             `network.allow = ["10.0.0.1/32"]`,
		"10.0.0.1:443":                         "IP address",
		"::1":                                  "IPv6",
		"[::1]:22":                             "IPv6",
		"host:0":                               "1 to 65535",
		"host:65536":                           "1 to 65535",
		"host:ssh":                             "1 to 65535",
		"host:":                                "1 to 65535",
		"a..example":                           "empty label",
		".example":                             "empty label",
		"-a.example":                           "hyphen",
		"a-.example":                           "hyphen",
		"a_b.example":                          "letters, digits and hyphens",
		"bücher.example":                       "punycode",
		strings.Repeat("a", 64):                "longer than 63",
		strings.Repeat("abcdefghi.", 26) + "x": "longer than 253",
	}
	for in, want := range bad {
		_, err := ParseHostRule(in)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseHostRule(%q) = %v; want an invalid-input error containing %q", in, err, want)
		}
	}
}

func TestHostRuleMatch(t *testing.T) {
	cases := []struct {
		rule string
		host string
		port uint16
		want bool
	}{
		{"api.example.test", "api.example.test", 443, true},
		{"api.example.test", "API.Example.TEST.", 80, true},
		{"api.example.test", "x.api.example.test", 443, false},
		{"api.example.test", "example.test", 443, false},
		{"api.example.test", "api.example.test.evil", 443, false},
		{"*.github.com", "api.github.com", 443, true},
		{"*.github.com", "a.b.github.com", 22, true},
		{"*.github.com", "github.com", 443, false},
		{"*.github.com", "evilgithub.com", 443, false},
		{"*.github.com", ".github.com", 443, false},
		{"*.github.com", "API.GitHub.Com.", 443, true},
		{"git.example.test:22", "git.example.test", 22, true},
		{"git.example.test:22", "git.example.test", 443, false},
		{"*.example.test:443", "a.example.test", 443, true},
		{"*.example.test:443", "a.example.test", 80, false},
	}
	for _, c := range cases {
		r, err := ParseHostRule(c.rule)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Match(c.host, c.port); got != c.want {
			t.Errorf("%s matches %s:%d = %v, want %v", c.rule, c.host, c.port, got, c.want)
		}
	}
}

func TestPresetsParse(t *testing.T) {
	names := PresetNames()
	if !sort.StringsAreSorted(names) || strings.Join(names, ",") != "anthropic,debian,github,npm,openai,pypi" {
		t.Fatalf("preset names %v", names)
	}
	for n, rules := range Presets {
		for _, s := range rules {
			if r, err := ParseHostRule(s); err != nil || r.String() != s {
				t.Errorf("preset %s: %q: %v (%v)", n, s, err, r)
			}
		}
	}
}

func hostsOf(t *testing.T, ss ...string) []HostRuleSource {
	var out []HostRuleSource
	for i, s := range ss {
		r, err := ParseHostRule(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, HostRuleSource{Rule: r, Source: "config.toml:" + string(rune('1'+i))})
	}
	return out
}

func TestDeriveAllowlistCanonicalV2(t *testing.T) {
	p, err := Derive(Input{
		Mode:      ModeAllowlist,
		Allow:     []Rule{{pfx("10.78.5.0/24"), "a:1"}},
		Resolvers: []netip.Addr{netip.MustParseAddr("10.0.2.3")},
		Hosts:     hostsOf(t, "z.example.test", "git.example.test:22", "*.cdn.example.test", "z.example.test:443", "git.example.test:22", "a.example.test:80", "a.example.test:443"),
		Ask:       true,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `lazaret-network-policy v2
ipv6 disabled
mode allowlist
deny 10.0.0.0/8
deny 100.64.0.0/10
deny 169.254.0.0/16
deny 172.16.0.0/12
deny 192.168.0.0/16
allow 10.0.2.3/32
allow 10.78.5.0/24
dns 10.0.2.3
host *.cdn.example.test
host a.example.test:80
host a.example.test:443
host git.example.test:22
host z.example.test
ask
`
	if got := string(p.Canonical()); got != want {
		t.Fatalf("canonical:\n%s\nwant:\n%s", got, want)
	}
	back, err := Decode(p.Canonical())
	if err != nil || back.Digest() != p.Digest() || back.Mode != ModeAllowlist || !back.Ask || len(back.Hosts) != 5 {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if r, ok := back.AllowsHost("X.CDN.example.test.", 8443); !ok || r.Pattern != "*.cdn.example.test" {
		t.Fatalf("AllowsHost wildcard: %v %v", r, ok)
	}
	if _, ok := back.AllowsHost("a.example.test", 8080); ok {
		t.Fatal("AllowsHost ignores the port")
	}
	if _, ok := back.AllowsHost("cdn.example.test", 443); ok {
		t.Fatal("a wildcard allows its apex")
	}
	// Without ask the line is absent, and the digest differs.
	p2, _ := Derive(Input{Mode: ModeAllowlist, Allow: []Rule{{pfx("10.78.5.0/24"), "a:1"}}, Resolvers: []netip.Addr{netip.MustParseAddr("10.0.2.3")},
		Hosts: hostsOf(t, "z.example.test", "git.example.test:22", "*.cdn.example.test", "a.example.test:80", "a.example.test:443")})
	if strings.Contains(string(p2.Canonical()), "ask") || p2.Digest() == p.Digest() {
		t.Fatalf("ask is not in the digest:\n%s", p2.Canonical())
	}
}

// TestDenyModeV1Unchanged pins the v1 encoding of a deny-mode policy: the
// digest of every existing Domain's policy must stay the same.
func TestDenyModeV1Unchanged(t *testing.T) {
	p, err := Derive(Input{Allow: []Rule{{pfx("10.78.0.0/24"), "a:1"}}, Resolvers: []netip.Addr{netip.MustParseAddr("10.255.255.53")}})
	if err != nil {
		t.Fatal(err)
	}
	const want = "lazaret-network-policy v1\nipv6 disabled\ndeny 10.0.0.0/8\ndeny 100.64.0.0/10\ndeny 169.254.0.0/16\ndeny 172.16.0.0/12\ndeny 192.168.0.0/16\nallow 10.78.0.0/24\nallow 10.255.255.53/32\ndns 10.255.255.53\n"
	if string(p.Canonical()) != want {
		t.Fatalf("v1 encoding changed:\n%s", p.Canonical())
	}
	// The SHA-256 of the bytes above (sha256sum), pinned.
	if got := p.Digest(); hex.EncodeToString(got[:]) != "939392469026546952638bc28592658d60dcad2cd6a487a3fe493397cd5d43a2" {
		t.Fatalf("digest changed: %x", got)
	}
}

func TestDeriveRefusesHostsOutsideAllowlist(t *testing.T) {
	if _, err := Derive(Input{Hosts: hostsOf(t, "a.example.test")}); err == nil || !strings.Contains(err.Error(), `network.mode = "allowlist"`) || !strings.Contains(err.Error(), "config.toml:1") {
		t.Fatalf("hosts in deny mode: %v", err)
	}
	if _, err := Derive(Input{Ask: true}); err == nil || !strings.Contains(err.Error(), `network.mode = "allowlist"`) {
		t.Fatalf("ask in deny mode: %v", err)
	}
	if _, err := Derive(Input{Mode: "open"}); err == nil || !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("unknown mode: %v", err)
	}
	if _, err := Derive(Input{Mode: ModeAllowlist, Hosts: []HostRuleSource{{Rule: HostRule{Pattern: "A.example"}, Source: "x:9"}}}); err == nil || !strings.Contains(err.Error(), "x:9") {
		t.Fatalf("non-canonical rule: %v", err)
	}
}

func TestDecodeV2Refusals(t *testing.T) {
	v1, _ := Derive(Input{})
	v2, _ := Derive(Input{Mode: ModeAllowlist, Hosts: hostsOf(t, "b.example.test", "a.example.test")})
	g1, g2 := string(v1.Canonical()), string(v2.Canonical())
	if _, err := Decode([]byte(g2)); err != nil {
		t.Fatalf("good v2: %v", err)
	}
	for name, bad := range map[string]string{
		"v1 with host":     g1 + "host a.example.test\n",
		"v1 with ask":      g1 + "ask\n",
		"v1 with mode":     strings.Replace(g1, "ipv6 disabled\n", "ipv6 disabled\nmode allowlist\n", 1),
		"v2 without mode":  strings.Replace(g2, "mode allowlist\n", "", 1),
		"v2 other mode":    strings.Replace(g2, "mode allowlist", "mode open", 1),
		"v2 late mode":     strings.Replace(g2, "mode allowlist\n", "", 1) + "mode allowlist\n",
		"v3":               strings.Replace(g2, "v2", "v3", 1),
		"unsorted hosts":   strings.Replace(g2, "host a.example.test\nhost b.example.test\n", "host b.example.test\nhost a.example.test\n", 1),
		"duplicate host":   g2 + "host b.example.test\n",
		"subsumed host":    g2 + "host b.example.test:443\n",
		"bad host":         strings.Replace(g2, "host a.example.test", "host 10.0.0.1", 1),
		"ask before hosts": strings.Replace(g2, "host a.example.test\n", "ask\nhost a.example.test\n", 1),
		"v2 deny-mode doc": strings.Replace(g1, "v1", "v2", 1),
	} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%s accepted:\n%s", name, bad)
		}
	}
}

func TestPermits(t *testing.T) {
	p, err := Derive(Input{
		Mode:      ModeAllowlist,
		Allow:     []Rule{{pfx("10.78.5.0/24"), "a"}, {pfx("127.0.0.1/32"), "b"}, {pfx("192.168.7.0/24"), "c"}},
		Deny:      []Rule{{pfx("198.18.0.0/15"), "d"}, {pfx("10.78.5.128/25"), "e"}},
		Resolvers: []netip.Addr{netip.MustParseAddr("10.0.2.3")},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{
		"93.184.216.34":   true,  // public: default permit
		"10.1.2.3":        false, // built-in deny
		"10.78.5.9":       true,  // allow /24 inside deny /8
		"10.78.5.200":     false, // more specific deny /25 inside the allow /24
		"10.0.2.3":        true,  // resolver /32
		"172.16.0.1":      false,
		"192.168.7.7":     true,
		"192.168.8.1":     false,
		"198.19.0.1":      false, // profile deny
		"100.64.0.1":      false,
		"127.0.0.1":       true, // loopback covered by an allow
		"127.0.0.2":       false,
		"0.0.0.0":         false,
		"0.1.2.3":         false,
		"169.254.169.254": false,
		"224.0.0.1":       false,
		"239.255.255.250": false,
		"240.0.0.1":       false,
		"255.255.255.255": false,
		"::1":             false,
		"2001:db8::1":     false,
		"::ffff:8.8.8.8":  true, // IPv4-mapped is the IPv4 address
	}
	for a, want := range cases {
		if got := p.Permits(netip.MustParseAddr(a)); got != want {
			t.Errorf("Permits(%s) = %v, want %v", a, got, want)
		}
	}
	if SpecialKind(netip.MustParseAddr("127.0.0.5")) != "loopback" || SpecialKind(netip.MustParseAddr("8.8.8.8")) != "" {
		t.Error("SpecialKind")
	}
	var empty Policy // no prefixes at all: special space is still refused
	if empty.Permits(netip.MustParseAddr("127.0.0.1")) || !empty.Permits(netip.MustParseAddr("8.8.8.8")) {
		t.Error("empty policy")
	}
}
