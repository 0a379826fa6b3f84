package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

// observedDefault is what the Runtime Supervisor reports for the default
// policy with one allow (the helper's DNS forwarder), as seen in hc.log.
var observedDefault = []string{
	"0.0.0.0/0 via 10.0.2.2 dev tap0", "10.0.0.0/8 via 127.0.0.1 dev lo", "10.0.2.0/24 via invalid IP dev tap0",
	"10.255.255.53/32 via 10.0.2.2 dev tap0", "100.64.0.0/10 via 127.0.0.1 dev lo", "169.254.0.0/16 via 127.0.0.1 dev lo",
	"172.16.0.0/12 via 127.0.0.1 dev lo", "192.168.0.0/16 via 127.0.0.1 dev lo",
}

func routesPolicy() Policy {
	var p Policy
	for _, d := range []string{"10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"} {
		p.Deny = append(p.Deny, netip.MustParsePrefix(d))
	}
	p.Allow = []netip.Prefix{netip.MustParsePrefix("10.255.255.53/32")}
	return p
}

func TestVerifyRoutes(t *testing.T) {
	gw := netip.MustParseAddr("10.0.2.2")
	if err := routesPolicy().VerifyRoutes(observedDefault, "tap0", gw); err != nil {
		t.Fatalf("the real routes of a default Domain: %v", err)
	}
	without := func(drop string) []string {
		var out []string
		for _, r := range observedDefault {
			if r != drop {
				out = append(out, r)
			}
		}
		return out
	}
	cases := map[string]struct {
		routes []string
		want   string
	}{
		"missing deny":       {without("172.16.0.0/12 via 127.0.0.1 dev lo"), "deny prefix 172.16.0.0/12 is not routed"},
		"missing allow":      {without("10.255.255.53/32 via 10.0.2.2 dev tap0"), "allow prefix 10.255.255.53/32"},
		"hole in a deny":     {append(without(""), "10.1.0.0/16 via 10.0.2.2 dev tap0"), "neither an allow prefix"},
		"deny via the tap":   {append(without("192.168.0.0/16 via 127.0.0.1 dev lo"), "192.168.0.0/16 via 10.0.2.2 dev tap0"), "neither an allow prefix"},
		"extra lo route":     {append(without(""), "8.8.8.0/24 via 127.0.0.1 dev lo"), "not a deny route"},
		"other device":       {append(without(""), "0.0.0.0/1 via 10.9.9.9 dev eth1"), "uses device eth1"},
		"other gateway":      {append(without(""), "1.2.3.0/24 via 10.0.2.9 dev tap0"), "not via the helper's gateway"},
		"wide connected":     {append(without(""), "10.0.0.0/8 via invalid IP dev tap0"), "not the helper's own subnet"},
		"malformed evidence": {append(without(""), "garbage"), "malformed observed route"},
	}
	for name, c := range cases {
		err := routesPolicy().VerifyRoutes(c.routes, "tap0", gw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
}

// TestDisplayRoutes: status shows a connected route as `ip route` does,
// without "via invalid IP"; a line that does not parse is kept as it is.
func TestDisplayRoutes(t *testing.T) {
	got := DisplayRoutes([]string{"0.0.0.0/0 via 10.0.2.2 dev tap0", "10.0.2.0/24 via invalid IP dev tap0", "garbage"})
	want := []string{"0.0.0.0/0 via 10.0.2.2 dev tap0", "10.0.2.0/24 dev tap0", "garbage"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("DisplayRoutes = %q, want %q", got, want)
	}
}
