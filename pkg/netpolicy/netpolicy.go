package netpolicy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Version of the canonical encoding; a newer one is refused. A policy in
// deny mode is still encoded as version 1 (VersionDeny), byte for byte as
// before host rules existed, so its digest does not change.
const (
	Version     = 2
	VersionDeny = 1
)

// DefaultDeny are the built-in deny prefixes (why each: pkg/config and
// docs/CONFIG.md).
var DefaultDeny = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
}

// Rule is one configured prefix with where it came from (for messages).
type Rule struct {
	Prefix netip.Prefix
	Source string // e.g. "config.toml:12 (profile claude, network.allow)"
}

// Input is the trusted configuration the policy derives from.
type Input struct {
	Allow     []Rule
	Deny      []Rule
	Resolvers []netip.Addr
	Mode      Mode
	Hosts     []HostRuleSource // allowlist mode only
	Ask       bool             // allowlist mode only: approve new hosts at the terminal
}

// Policy is the derived, canonical policy.
type Policy struct {
	Deny      []netip.Prefix
	Allow     []netip.Prefix
	Resolvers []netip.Addr
	Mode      Mode
	Hosts     []HostRule // sorted, without duplicates or rules a portless rule of the same pattern subsumes
	Ask       bool
}

// ConflictError reports an equal-prefix allow/deny pair.
type ConflictError struct {
	Prefix      netip.Prefix
	Allow, Deny string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("network policy conflict: %s is both allowed (%s) and denied (%s); remove one of them (a more specific allow inside a denied range is fine)", e.Prefix, e.Allow, e.Deny)
}

func checkPrefix(r Rule) error {
	if !r.Prefix.IsValid() || !r.Prefix.Addr().Is4() {
		return fmt.Errorf("%s: %v is not an IPv4 prefix (IPv6 is disabled in the sandbox)", r.Source, r.Prefix)
	}
	if r.Prefix.Masked() != r.Prefix {
		return fmt.Errorf("%s: %v has host bits set; write %v", r.Source, r.Prefix, r.Prefix.Masked())
	}
	return nil
}

// Derive validates in and returns the canonical policy.
func Derive(in Input) (Policy, error) {
	deny := map[netip.Prefix]string{}
	for _, p := range DefaultDeny {
		deny[p] = "built-in default deny"
	}
	for _, r := range in.Deny {
		if err := checkPrefix(r); err != nil {
			return Policy{}, err
		}
		deny[r.Prefix] = r.Source
	}
	allow := map[netip.Prefix]string{}
	for _, r := range in.Allow {
		if err := checkPrefix(r); err != nil {
			return Policy{}, err
		}
		if src, ok := deny[r.Prefix]; ok {
			return Policy{}, &ConflictError{Prefix: r.Prefix, Allow: r.Source, Deny: src}
		}
		allow[r.Prefix] = r.Source
	}
	var p Policy
	switch in.Mode {
	case ModeDeny:
		if len(in.Hosts) > 0 {
			return Policy{}, errdefs.New(errdefs.ErrInvalid, "%s: host rules need network.mode = \"allowlist\"", in.Hosts[0].Source)
		}
		if in.Ask {
			return Policy{}, errdefs.New(errdefs.ErrInvalid, "network.ask = true needs network.mode = \"allowlist\"")
		}
	case ModeAllowlist:
		p.Mode, p.Ask = ModeAllowlist, in.Ask
		for _, h := range in.Hosts {
			r, err := ParseHostRule(h.Rule.String())
			if err != nil || r != h.Rule {
				return Policy{}, errdefs.New(errdefs.ErrInvalid, "%s: host rule %q is not in canonical form (%v)", h.Source, h.Rule.String(), err)
			}
			p.Hosts = append(p.Hosts, r)
		}
		sortHostRules(p.Hosts)
		p.Hosts = compactHostRules(p.Hosts)
	default:
		return Policy{}, errdefs.New(errdefs.ErrInvalid, "network.mode %q is not \"deny\" or \"allowlist\"", in.Mode)
	}
	for _, a := range in.Resolvers {
		if !a.Is4() {
			return Policy{}, fmt.Errorf("DNS resolver %v is not IPv4 (IPv6 is disabled in the sandbox)", a)
		}
		host := netip.PrefixFrom(a, 32)
		if src, ok := deny[host]; ok {
			return Policy{}, &ConflictError{Prefix: host, Allow: "DNS resolver " + a.String(), Deny: src}
		}
		allow[host] = "DNS resolver"
		p.Resolvers = append(p.Resolvers, a)
	}
	for q := range deny {
		p.Deny = append(p.Deny, q)
	}
	for q := range allow {
		p.Allow = append(p.Allow, q)
	}
	sortPrefixes(p.Deny)
	sortPrefixes(p.Allow)
	sort.Slice(p.Resolvers, func(i, j int) bool { return p.Resolvers[i].Less(p.Resolvers[j]) })
	p.Resolvers = compactAddrs(p.Resolvers)
	return p, nil
}

func sortPrefixes(ps []netip.Prefix) {
	sort.Slice(ps, func(i, j int) bool {
		if c := ps[i].Addr().Compare(ps[j].Addr()); c != 0 {
			return c < 0
		}
		return ps[i].Bits() < ps[j].Bits()
	})
}

func compactAddrs(as []netip.Addr) []netip.Addr {
	out := as[:0]
	for i, a := range as {
		if i == 0 || a != as[i-1] {
			out = append(out, a)
		}
	}
	return out
}

// MaxCanonicalSize bounds the canonical encoding a reader of the sealed
// policy memfd accepts (RS and the egress proxy).
const MaxCanonicalSize = 1 << 20

// Canonical is the policy's canonical encoding: a version line, then one
// line per entry in sorted order.
//
// A deny-mode policy is version 1; an allowlist policy is version 2, with
// a "mode allowlist" line after the address-family line, a "host" line per
// host rule after the resolvers, and a final "ask" line when new hosts are
// approved at the terminal.
func (p Policy) Canonical() []byte {
	var b bytes.Buffer
	if p.Mode == ModeDeny {
		fmt.Fprintf(&b, "lazaret-network-policy v%d\n", VersionDeny)
	} else {
		fmt.Fprintf(&b, "lazaret-network-policy v%d\n", Version)
	}
	b.WriteString("ipv6 disabled\n")
	if p.Mode != ModeDeny {
		fmt.Fprintf(&b, "mode %s\n", p.Mode)
	}
	for _, q := range p.Deny {
		fmt.Fprintf(&b, "deny %s\n", q)
	}
	for _, q := range p.Allow {
		fmt.Fprintf(&b, "allow %s\n", q)
	}
	for _, a := range p.Resolvers {
		fmt.Fprintf(&b, "dns %s\n", a)
	}
	if p.Mode != ModeDeny {
		for _, h := range p.Hosts {
			fmt.Fprintf(&b, "host %s\n", h)
		}
		if p.Ask {
			b.WriteString("ask\n")
		}
	}
	return b.Bytes()
}

// Digest is the SHA-256 of the canonical encoding.
func (p Policy) Digest() [32]byte { return sha256.Sum256(p.Canonical()) }

// Decode parses canonical bytes, refusing anything not produced by
// Canonical (unknown lines, a newer version, unsorted or duplicate entries).
func Decode(b []byte) (Policy, error) {
	var p Policy
	version := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case line == 1:
			var v int
			if _, err := fmt.Sscanf(text, "lazaret-network-policy v%d", &v); err != nil {
				return Policy{}, fmt.Errorf("network policy: bad header %q", text)
			}
			if v > Version {
				return Policy{}, fmt.Errorf("network policy version %d is newer than %d: use matching Lazaret binaries", v, Version)
			}
			if v < VersionDeny {
				return Policy{}, fmt.Errorf("network policy: bad version %d", v)
			}
			version = v
		case line == 2:
			if text != "ipv6 disabled" {
				return Policy{}, fmt.Errorf("network policy: bad address-family line %q", text)
			}
		case text == "ask":
			if version < 2 {
				return Policy{}, fmt.Errorf("network policy line %d: %q in a version %d policy", line, text, version)
			}
			p.Ask = true
		default:
			kind, val, ok := strings.Cut(text, " ")
			if !ok {
				return Policy{}, fmt.Errorf("network policy line %d: %q", line, text)
			}
			switch kind {
			case "deny", "allow":
				q, err := netip.ParsePrefix(val)
				if err != nil {
					return Policy{}, fmt.Errorf("network policy line %d: %v", line, err)
				}
				if kind == "deny" {
					p.Deny = append(p.Deny, q)
				} else {
					p.Allow = append(p.Allow, q)
				}
			case "dns":
				a, err := netip.ParseAddr(val)
				if err != nil {
					return Policy{}, fmt.Errorf("network policy line %d: %v", line, err)
				}
				p.Resolvers = append(p.Resolvers, a)
			case "mode", "host":
				if version < 2 {
					return Policy{}, fmt.Errorf("network policy line %d: %q in a version %d policy", line, kind, version)
				}
				if kind == "mode" {
					if Mode(val) != ModeAllowlist || line != 3 {
						return Policy{}, fmt.Errorf("network policy line %d: bad mode line %q", line, text)
					}
					p.Mode = ModeAllowlist
					continue
				}
				r, err := ParseHostRule(val)
				if err != nil {
					return Policy{}, fmt.Errorf("network policy line %d: %v", line, err)
				}
				p.Hosts = append(p.Hosts, r)
			default:
				return Policy{}, fmt.Errorf("network policy line %d: unknown entry %q", line, kind)
			}
		}
	}
	// Canonical form is sorted and duplicate-free: re-derive the order and
	// compare, so any other arrangement is refused.
	if version == 2 && p.Mode != ModeAllowlist {
		return Policy{}, fmt.Errorf("network policy version 2 without a mode line")
	}
	q := Policy{Deny: append([]netip.Prefix(nil), p.Deny...), Allow: append([]netip.Prefix(nil), p.Allow...), Resolvers: append([]netip.Addr(nil), p.Resolvers...),
		Mode: p.Mode, Hosts: append([]HostRule(nil), p.Hosts...), Ask: p.Ask}
	sortHostRules(q.Hosts)
	q.Hosts = compactHostRules(q.Hosts)
	sortPrefixes(q.Deny)
	sortPrefixes(q.Allow)
	sort.Slice(q.Resolvers, func(i, j int) bool { return q.Resolvers[i].Less(q.Resolvers[j]) })
	q.Resolvers = compactAddrs(q.Resolvers)
	if !bytes.Equal(q.Canonical(), b) {
		return Policy{}, fmt.Errorf("network policy is not in canonical form")
	}
	return q, nil
}

// FailFast is the deny space minus every allow prefix and the given
// exclusions (the connectivity helper's subnet), as a minimal list of
// prefixes. The Runtime Supervisor assigns one address of each to lo
// (without a prefix route): gVisor treats lo as bound to the whole subnet
// of its addresses, so a connection into denied space is answered locally
// at once (refused, port unreachable) instead of vanishing into the
// loopback deny route. Traffic still never leaves; permitted destinations
// are excluded so they stay off lo.
func (p Policy) FailFast(exclude ...netip.Prefix) []netip.Prefix {
	holes := append(append([]netip.Prefix(nil), p.Allow...), exclude...)
	var out []netip.Prefix
	for _, d := range p.Deny {
		out = append(out, Subtract(d, holes)...)
	}
	sortPrefixes(out)
	// Drop prefixes covered by an earlier (shorter) one.
	var kept []netip.Prefix
	for _, q := range out {
		covered := false
		for _, k := range kept {
			if k.Bits() <= q.Bits() && k.Contains(q.Addr()) {
				covered = true
				break
			}
		}
		if !covered {
			kept = append(kept, q)
		}
	}
	return kept
}

// Subtract returns p minus every hole, as a minimal list of prefixes.
func Subtract(p netip.Prefix, holes []netip.Prefix) []netip.Prefix {
	for _, h := range holes {
		if h.Bits() <= p.Bits() && h.Contains(p.Addr()) {
			return nil // p lies inside a hole
		}
	}
	inside := false
	for _, h := range holes {
		if h.Bits() > p.Bits() && p.Contains(h.Addr()) {
			inside = true
			break
		}
	}
	if !inside {
		return []netip.Prefix{p}
	}
	// Split p into its two halves and recurse.
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	b := p.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= 1 << (31 - p.Bits())
	hi := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), p.Bits()+1)
	return append(Subtract(lo, holes), Subtract(hi, holes)...)
}
