package netpolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// LoopbackGateway is the gateway of every deny route: a loopback unicast
// address, the only deny form gVisor honours.
var LoopbackGateway = netip.MustParseAddr("127.0.0.1")

// ObservedRoute is one route the Runtime Supervisor read back from the
// enforcement namespace ("DST via GW dev DEV"; GW "invalid IP" for a
// connected route).
type ObservedRoute struct {
	Dst     netip.Prefix
	Gateway netip.Addr // invalid for a connected route
	Dev     string
}

// ParseObservedRoute reads one route line as the Runtime Supervisor
// reports it.
func ParseObservedRoute(s string) (ObservedRoute, error) {
	dst, rest, ok := strings.Cut(s, " via ")
	gw, dev, ok2 := strings.Cut(rest, " dev ")
	if !ok || !ok2 || dev == "" || strings.ContainsAny(dev, " \t\n") {
		return ObservedRoute{}, fmt.Errorf("malformed observed route %q", s)
	}
	p, err := netip.ParsePrefix(dst)
	if err != nil {
		return ObservedRoute{}, fmt.Errorf("observed route %q: %w", s, err)
	}
	r := ObservedRoute{Dst: p, Dev: dev}
	if gw != "invalid IP" {
		if r.Gateway, err = netip.ParseAddr(gw); err != nil {
			return ObservedRoute{}, fmt.Errorf("observed route %q: %w", s, err)
		}
	}
	return r, nil
}

// String is the route as `ip route` shows it: a connected route has no
// "via".
func (r ObservedRoute) String() string {
	if !r.Gateway.IsValid() {
		return fmt.Sprintf("%s dev %s", r.Dst, r.Dev)
	}
	return fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gateway, r.Dev)
}

// DisplayRoutes is the Runtime Supervisor's observed route lines as
// `lazaret status` shows them (ObservedRoute.String); a line that does not
// parse is shown as it is.
func DisplayRoutes(lines []string) []string {
	out := make([]string, 0, len(lines))
	for _, line := range lines {
		if r, err := ParseObservedRoute(line); err == nil {
			line = r.String()
		}
		out = append(out, line)
	}
	return out
}

// VerifyRoutes checks the Runtime Supervisor's readiness evidence — the
// routes it observed in the enforcement namespace — against the policy the
// coordinator derived itself, not against anything the supervisor says it
// installed:
//
//   - every deny prefix is routed exactly via 127.0.0.1 dev lo, and lo
//     carries no other route;
//   - every allow prefix is routed via gateway on dev tap;
//   - the only other routes are the default route via gateway on tap and
//     the tap's connected subnet, which must contain the gateway;
//   - no route uses any other device.
//
// Anything else (a missing deny, a more specific hole, a route through an
// unknown device) refuses readiness.
func (p Policy) VerifyRoutes(observed []string, tap string, gateway netip.Addr) error {
	deny := map[netip.Prefix]bool{}
	for _, d := range p.Deny {
		deny[d] = false
	}
	allow := map[netip.Prefix]bool{}
	for _, a := range p.Allow {
		allow[a] = false
	}
	for _, line := range observed {
		r, err := ParseObservedRoute(line)
		if err != nil {
			return err
		}
		switch {
		case r.Dev == "lo":
			if _, ok := deny[r.Dst]; !ok || r.Gateway != LoopbackGateway {
				return fmt.Errorf("route %q on lo is not a deny route of the policy", line)
			}
			deny[r.Dst] = true
		case r.Dev != tap:
			return fmt.Errorf("route %q uses device %s: only lo and the connectivity helper's %s may carry routes", line, r.Dev, tap)
		case !r.Gateway.IsValid():
			if !r.Dst.Contains(gateway) || r.Dst.Bits() < 16 {
				return fmt.Errorf("connected route %q is not the helper's own subnet around %s", line, gateway)
			}
		case r.Gateway != gateway:
			return fmt.Errorf("route %q is not via the helper's gateway %s", line, gateway)
		case r.Dst.Bits() == 0:
			// the default route via the helper
		default:
			if _, ok := allow[r.Dst]; !ok {
				return fmt.Errorf("route %q is neither an allow prefix of the policy nor the default route", line)
			}
			allow[r.Dst] = true
		}
	}
	for d, seen := range deny {
		if !seen {
			return fmt.Errorf("deny prefix %s is not routed via 127.0.0.1 dev lo", d)
		}
	}
	for a, seen := range allow {
		if !seen {
			return fmt.Errorf("allow prefix %s is not routed via %s dev %s", a, gateway, tap)
		}
	}
	return nil
}
