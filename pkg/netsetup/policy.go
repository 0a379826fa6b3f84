package netsetup

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/netpolicy"
)

// loopbackGateway is where deny routes send traffic: a loopback unicast
// address. gVisor imports routes per interface and ignores routes without
// one (blackhole, unreachable, prohibit), so this is the only deny form it
// honours (spec §3.6, SR-6).
var loopbackGateway = net.IPv4(127, 0, 0, 1)

// Route is one observed IPv4 route of the enforcement namespace.
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
	Dev     string
}

func (r Route) String() string {
	return fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gateway, r.Dev)
}

// DisableIPv6 turns IPv6 off in the current network namespace, so that the
// IPv4-only policy covers every enabled address family (SR-6).
func DisableIPv6() error {
	for _, k := range []string{"all", "default", "lo"} {
		p := "/proc/sys/net/ipv6/conf/" + k + "/disable_ipv6"
		if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("disable IPv6 (%s): %w", p, err)
		}
	}
	return nil
}

// InstallPolicy installs the derived policy in the current network
// namespace: each deny prefix as a loopback-unicast route (via 127.0.0.1
// dev lo), each allow prefix via gateway on dev tap. With tap == "" (no
// connectivity helper yet) allow routes are not installed. Each failFast
// prefix gets one address on lo without a prefix route (so the deny routes
// stay the only routes into denied space): gVisor answers connections into
// a subnet of a loopback address locally, so denied connections fail at
// once instead of timing out (netpolicy.Policy.FailFast). It returns the
// routes read back from the kernel.
//
// Preconditions: CAP_NET_ADMIN in the namespace (the Runtime Supervisor
// before its capability drop); lo is up.
func InstallPolicy(p netpolicy.Policy, tap string, gateway netip.Addr, failFast []netip.Prefix) ([]Route, error) {
	// One netlink socket for every request: the package-level calls open,
	// bind and close a socket each, and a policy with its fail-fast
	// addresses is some fifty requests on the start-up path.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open a netlink socket: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find lo: %w", err)
	}
	for _, f := range failFast {
		a := &netlink.Addr{IPNet: ipNet(f), Flags: unix.IFA_F_NOPREFIXROUTE, Scope: unix.RT_SCOPE_HOST}
		if err := h.AddrAdd(lo, a); err != nil {
			return nil, fmt.Errorf("assign fail-fast address %s to lo: %w", f, err)
		}
	}
	for _, d := range p.Deny {
		r := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: ipNet(d), Gw: loopbackGateway, Type: unix.RTN_UNICAST}
		if err := h.RouteAdd(r); err != nil {
			return nil, fmt.Errorf("install deny route %s via 127.0.0.1 dev lo: %w", d, err)
		}
	}
	if tap != "" {
		link, err := h.LinkByName(tap)
		if err != nil {
			return nil, fmt.Errorf("find %s: %w", tap, err)
		}
		for _, a := range p.Allow {
			r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(a), Gw: net.IP(gateway.AsSlice()), Type: unix.RTN_UNICAST}
			if err := h.RouteAdd(r); err != nil {
				return nil, fmt.Errorf("install allow route %s via %s dev %s: %w", a, gateway, tap, err)
			}
		}
	}
	return routesWith(h)
}

// Routes reads the main-table IPv4 routes of the current namespace.
func Routes() ([]Route, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open a netlink socket: %w", err)
	}
	defer h.Close()
	return routesWith(h)
}

// routesWith is Routes through the netlink handle h (whose namespace it
// reads), naming each route's device from one link listing.
func routesWith(h *netlink.Handle) ([]Route, error) {
	rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	var out []Route
	for _, r := range rs {
		var o Route
		if r.Dst != nil {
			ones, _ := r.Dst.Mask.Size()
			a, _ := netip.AddrFromSlice(r.Dst.IP.To4())
			o.Dst = netip.PrefixFrom(a, ones)
		} else {
			o.Dst = netip.MustParsePrefix("0.0.0.0/0")
		}
		if r.Gw != nil {
			o.Gateway, _ = netip.AddrFromSlice(r.Gw.To4())
		}
		o.Dev = names[r.LinkIndex]
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// VerifyDenyRoutes checks that every deny prefix of p is present exactly as
// a loopback-unicast route in routes (attestation by observed state).
func VerifyDenyRoutes(p netpolicy.Policy, routes []Route) error {
	have := map[netip.Prefix]Route{}
	for _, r := range routes {
		have[r.Dst] = r
	}
	for _, d := range p.Deny {
		r, ok := have[d]
		if !ok || r.Dev != "lo" || r.Gateway != netip.MustParseAddr("127.0.0.1") {
			return fmt.Errorf("deny prefix %s is not routed via 127.0.0.1 dev lo (observed %v)", d, r)
		}
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), 32)}
}

// InterfaceAddress is the first IPv4 address (with its prefix) of the named
// interface, which must exist and be up.
func InterfaceAddress(name string) (netip.Prefix, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("find %s: %w", name, err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		return netip.Prefix{}, fmt.Errorf("%s is down", name)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		return netip.PrefixFrom(ip, ones), nil
	}
	return netip.Prefix{}, fmt.Errorf("%s has no IPv4 address", name)
}
