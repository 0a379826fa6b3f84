package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/slirp"

	"encoding/hex"
	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// DerivePolicy derives the generation's network policy from trusted
// configuration only (FR-19): the built-in defaults and the host's DNS
// resolvers. The sandbox never supplies policy. The policy is kept for the
// generation and returned.
func (s *Service) DerivePolicy() (netpolicy.Policy, error) {
	prof := s.cfg.Profile
	in := netpolicy.Input{Resolvers: prof.Network.DNS}
	if len(in.Resolvers) == 0 {
		resolvers, err := hostResolvers("/etc/resolv.conf")
		if err != nil {
			s.log.Warn("no usable DNS resolvers from the host", "err", err)
		}
		in.Resolvers = resolvers
	}
	src := "profile " + prof.Name
	if prof.Network.Mode == config.ModeAllowlist {
		// The egress proxy admits the host names and resolves them
		// itself, at each request: nothing is pinned.
		in.Mode, in.Hosts, in.Ask = netpolicy.ModeAllowlist, prof.Network.HostRules(prof.Name), prof.Network.Ask
	} else {
		in.Allow = append(in.Allow, s.resolveAllowHosts(in.Resolvers)...)
	}
	for _, a := range prof.Network.Allow {
		in.Allow = append(in.Allow, netpolicy.Rule{Prefix: a, Source: src + " network.allow"})
	}
	for _, d := range prof.Network.Deny {
		in.Deny = append(in.Deny, netpolicy.Rule{Prefix: d, Source: src + " network.deny"})
	}
	p, err := netpolicy.Derive(in)
	if err != nil {
		return p, errdefs.Mark(err, errdefs.ErrInvalid)
	}
	s.mu.Lock()
	s.policy = p
	s.mu.Unlock()
	return p, nil
}

// hostResolvers reads the IPv4 nameservers of a resolv.conf, skipping
// loopback ones (a host-local stub is not reachable from the sandbox).
func hostResolvers(file string) ([]netip.Addr, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.Is4() || a.IsLoopback() {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// resolveAllowHosts resolves the profile's network.allow_hosts through the
// Domain's resolvers (the host's when the profile names none) into exact
// /32 allow rules, pinned for the generation: gVisor imports routes only at
// boot, so a later DNS change takes effect at the next generation. A name
// that does not resolve is reported and left out (an offline host still
// starts).
func (s *Service) resolveAllowHosts(resolvers []netip.Addr) []netpolicy.Rule {
	prof := s.cfg.Profile
	hosts := prof.Network.AllowHosts
	if len(hosts) == 0 {
		return nil
	}
	r := net.DefaultResolver
	if len(prof.Network.DNS) > 0 {
		servers := prof.Network.DNS
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, netip.AddrPortFrom(servers[0], 53).String())
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostResolveTimeout)
	defer cancel()
	type result struct {
		host  string
		addrs []netip.Addr
		err   error
	}
	results := make(chan result, len(hosts))
	for _, h := range hosts {
		go func() {
			as, err := r.LookupNetIP(ctx, "ip4", h)
			results <- result{h, as, err}
		}()
	}
	pinned := map[string][]string{}
	var rules []netpolicy.Rule
	for range hosts {
		res := <-results
		if res.err != nil || len(res.addrs) == 0 {
			msg := fmt.Sprintf("network.allow_hosts %s did not resolve (%v): it is not reachable in this generation", res.host, res.err)
			s.log.Warn("allow host unresolved", "host", res.host, "err", res.err)
			s.cfg.Progress(control.ProgressWarning + msg)
			pinned[res.host] = []string{}
			continue
		}
		for _, a := range res.addrs {
			a = a.Unmap()
			if !a.Is4() {
				continue
			}
			rules = append(rules, netpolicy.Rule{Prefix: netip.PrefixFrom(a, 32), Source: fmt.Sprintf("profile %s network.allow_hosts %s", prof.Name, res.host)})
			pinned[res.host] = append(pinned[res.host], a.String())
		}
	}
	s.mu.Lock()
	s.pinnedHosts = pinned
	s.mu.Unlock()
	s.log.Info("allow hosts pinned for the generation", "hosts", fmt.Sprint(pinned))
	return rules
}

// Prepare fixes the generation's network identity from RS's netns (read
// through RS's pidfd; the hello is checked against it later): the
// readiness fingerprint, the probe spec, and the sandbox's name-service
// files.
func (s *Service) Prepare(netns *lv1.NamespaceIdentity) error {
	addr, err := slirp.NetworkFor(slirp.DefaultCIDR)
	if err != nil {
		return err
	}
	pol := s.Policy()
	fp := ReadinessFingerprint(s.cfg.DomainID, s.cfg.Generation, s.cfg.Profile.Fingerprint(), s.cfg.SidecarID, pol.Digest(), netns)
	probe := netprobe.Spec{
		Version: netprobe.Version, Fingerprint: hex.EncodeToString(fp[:]),
		Deny: pol.Deny, Allow: pol.Allow, Connected: addr.CIDR,
		Gateway: addr.Gateway, Guest: addr.Guest, DNS: addr.DNS, DNSBound: dnsProbeBound,
	}
	resolver := addr.DNS
	if pol.Mode == netpolicy.ModeAllowlist {
		// The sandbox's namespace routes only to the egress proxy: every
		// prefix the policy names, and both halves of the address space,
		// must be unreachable there.
		deny := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1")}
		deny = append(append(deny, pol.Deny...), pol.Allow...)
		probe = netprobe.Spec{
			Version: netprobe.Version, Fingerprint: hex.EncodeToString(fp[:]), Mode: netprobe.ModeAllowlist,
			Deny: deny, Connected: netpolicy.ProxyPrefix,
			Proxy: netip.AddrPortFrom(netpolicy.ProxyAddr, netpolicy.HTTPPort),
		}
		// No resolver inside: names are the proxy's to resolve. A lookup
		// goes to the proxy's address, where nothing answers DNS, and
		// fails at once.
		resolver = netpolicy.ProxyAddr
	}
	dir := filepath.Join(s.cfg.RuntimeDir, "etc")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	files := map[string][]byte{
		"resolv.conf":        fmt.Appendf(nil, "# Lazaret: the connectivity helper's DNS forwarder (generation %d)\nnameserver %s\n", s.cfg.Generation, resolver),
		"hosts":              fmt.Appendf(nil, "127.0.0.1\tlocalhost\n127.0.1.1\t%s\n", s.cfg.Hostname),
		"hostname":           []byte(s.cfg.Hostname + "\n"),
		"helper-resolv.conf": slirp.ResolvConf(pol.Resolvers),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.addr, s.netns, s.fingerprint, s.probe = addr, netns, fp, probe
	s.etcFiles = map[string]string{
		"/etc/resolv.conf": filepath.Join(dir, "resolv.conf"),
		"/etc/hosts":       filepath.Join(dir, "hosts"),
		"/etc/hostname":    filepath.Join(dir, "hostname"),
	}
	s.mu.Unlock()
	return nil
}
