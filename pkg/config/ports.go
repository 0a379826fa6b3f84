package config

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
)

// LoopbackAddr is the host address a forwarded port listens on unless the
// profile names another.
var LoopbackAddr = netip.MustParseAddr("127.0.0.1")

// Port is a TCP port forwarded from the host into the sandbox through the
// connectivity helper (slirp4netns host forwarding): connections to
// HostAddr:HostPort on the host reach GuestPort of the sandbox.
type Port struct {
	HostAddr  netip.Addr
	HostPort  uint16
	GuestPort uint16
}

// String is the canonical form ADDR:HOST:GUEST.
func (p Port) String() string {
	return fmt.Sprintf("%s:%d:%d", p.HostAddr, p.HostPort, p.GuestPort)
}

// Host is the host address and port the forward listens on.
func (p Port) Host() string { return netip.AddrPortFrom(p.HostAddr, p.HostPort).String() }

// MarshalText encodes the canonical form.
func (p Port) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText decodes the canonical form (any address).
func (p *Port) UnmarshalText(b []byte) error {
	q, msg := parsePort(string(b), true)
	if msg != "" {
		return fmt.Errorf("port %q: %s", b, msg)
	}
	*p = q
	return nil
}

// ParsePort parses a forwarded port given on the command line
// (`lazaret run -P`): PORT, HOST:GUEST or ADDR:HOST:GUEST with a loopback
// ADDR. Only the trusted configuration may name another address.
func ParsePort(s string) (Port, error) {
	p, msg := parsePort(s, false)
	if msg != "" {
		return Port{}, fmt.Errorf("-P %q: %s", s, msg)
	}
	return p, nil
}

// parsePort parses PORT, HOST:GUEST or ADDR:HOST:GUEST (TCP). anyAddr
// allows a non-loopback ADDR.
func parsePort(s string, anyAddr bool) (Port, string) {
	parts := strings.Split(s, ":")
	p := Port{HostAddr: LoopbackAddr}
	num := func(what, v string) (uint16, string) {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != v {
			return 0, fmt.Sprintf("%s port %q is not a number from 1 to 65535", what, v)
		}
		return uint16(n), ""
	}
	var msg string
	switch len(parts) {
	case 1:
		if p.HostPort, msg = num("the", parts[0]); msg == "" {
			p.GuestPort = p.HostPort
		}
	case 2:
		if p.HostPort, msg = num("the host", parts[0]); msg == "" {
			p.GuestPort, msg = num("the sandbox", parts[1])
		}
	case 3:
		a, err := netip.ParseAddr(parts[0])
		switch {
		case err != nil || a.Zone() != "":
			return Port{}, fmt.Sprintf("%q is not an IPv4 host address: write e.g. 127.0.0.1:8080:80", parts[0])
		case !a.Is4():
			return Port{}, fmt.Sprintf("%s is not IPv4: the sandbox has IPv6 disabled; write 127.0.0.1", a)
		case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			return Port{}, fmt.Sprintf("%s cannot be listened on: write 127.0.0.1", a)
		case !anyAddr && !a.IsLoopback():
			return Port{}, fmt.Sprintf("%s is not a loopback address: on the command line a port is forwarded on loopback only (other machines could reach it); name the address in the profile's ports if you mean it", a)
		}
		p.HostAddr = a
		if p.HostPort, msg = num("the host", parts[1]); msg == "" {
			p.GuestPort, msg = num("the sandbox", parts[2])
		}
	default:
		return Port{}, "write PORT (the same on both sides), HOST:SANDBOX or ADDRESS:HOST:SANDBOX, e.g. \"5173\", \"8080:80\" or \"127.0.0.1:8080:80\" (TCP)"
	}
	if msg != "" {
		return Port{}, msg
	}
	return p, ""
}

// decodePorts decodes ports.
func (d *doc) decodePorts(p pathKey, v any, l *layer, defaults bool) {
	ss, ps := d.strs(p, v)
	for i, s := range ss {
		pt, msg := parsePort(s, true)
		if msg != "" {
			d.valueErrorf(ps[i], "%s", msg)
			continue
		}
		l.ports = append(l.ports, entry[Port]{pt, ps[i], d.entryWhere(ps[i], defaults)})
	}
}

// mergePorts takes the union of the layers' ports; two forwards of one
// host address and port are an error naming both.
func (d *doc) mergePorts(p *Profile, layers []*layer) {
	host := map[string]entry[Port]{}
	for _, l := range layers {
		if l == nil {
			continue
		}
		for _, e := range l.ports {
			prev, dup := host[e.v.Host()]
			switch {
			case dup && prev.v == e.v:
			case dup:
				d.valueErrorf(e.path, "profile %q: host %s is forwarded twice (also to sandbox port %d at %s): one host port forwards to one sandbox port; change one", p.Name, e.v.Host(), prev.v.GuestPort, prev.where)
			default:
				host[e.v.Host()] = e
			}
		}
	}
	p.Ports = []Port{}
	for _, e := range host {
		p.Ports = append(p.Ports, e.v)
	}
	SortPorts(p.Ports)
}

// SortPorts orders ports by host address and port.
func SortPorts(ps []Port) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].HostAddr != ps[j].HostAddr {
			return ps[i].HostAddr.Less(ps[j].HostAddr)
		}
		return ps[i].HostPort < ps[j].HostPort
	})
}
