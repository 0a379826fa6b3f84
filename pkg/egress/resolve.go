package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// NewResolver returns a Resolve function that asks the DNS server at
// server (the connectivity helper's forwarder, which relays to the
// Domain's resolvers) for A records only. The name is looked up fully
// qualified, so no search domain of the host's resolv.conf is appended.
func NewResolver(server netip.AddrPort) func(ctx context.Context, host string) ([]netip.Addr, error) {
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server.String())
		},
	}
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		addrs, err := r.LookupNetIP(ctx, "ip4", host+".")
		if err != nil {
			return nil, fmt.Errorf("resolve %s via %s: %w", host, server, err)
		}
		return addrs, nil
	}
}
