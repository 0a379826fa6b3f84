// Package netprobe is the generation-bound network readiness probe (spec
// §3.6, FR-18, FR-20). The Host Coordinator builds a Spec from the derived
// policy and the connectivity helper's addresses; the Agent Sandbox's init
// runs it in the sandbox's own network view (inside gVisor, before any
// session exists) and prints one Report line; the coordinator Judges the
// report against the spec and persists the result as readiness evidence.
//
// Nothing here waits for a timeout to conclude anything about the policy:
//
//   - deny: a UDP connect (no packet is sent) to an address in each deny
//     prefix must pick the loopback source 127.0.0.1 — the route gVisor
//     imported is the loopback-unicast deny route — or, where the Runtime
//     Supervisor assigned the fail-fast address space to lo, the address
//     itself (it is local); then a TCP connect to it must be refused at
//     once, proving denied connections fail fast;
//   - permit: the same to an address in each allow prefix must pick the
//     tap address (the route via the helper's gateway); the gateway must be
//     routed via the tap and answer a TCP connect at once (slirp4netns with
//     host loopback disabled answers with an ICMP error);
//   - DNS: the helper's forwarder must return a well-formed reply (any
//     rcode) to a query for a name under .invalid within a bound. An offline
//     host gets no answer: that is recorded, not fatal.
//
// It is linked into the sandbox's init, so it imports nothing host-side,
// and it is a primitive package: its socket calls are made directly
// (socket.go), on the calling thread, without Go's dialer (Run says why).
package netprobe

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Version of the Spec and Report encodings; a different one is refused.
const Version = 1

// LinePrefix starts the report line the sandbox init prints on its stdout.
const LinePrefix = "lazaret-netprobe "

// LoopbackSource is the source address a deny route yields.
var LoopbackSource = netip.MustParseAddr("127.0.0.1")

// Spec is what the probe checks. Fingerprint binds it to one generation's
// readiness fingerprint (hex); the report echoes it.
type Spec struct {
	Version     int            `json:"version"`
	Fingerprint string         `json:"fingerprint"`
	Deny        []netip.Prefix `json:"deny"`
	Allow       []netip.Prefix `json:"allow"`
	// Connected is the helper's own subnet (more specific than any deny);
	// probe addresses are never chosen inside it.
	Connected netip.Prefix `json:"connected"`
	Gateway   netip.Addr   `json:"gateway"`
	Guest     netip.Addr   `json:"guest"` // the tap address
	DNS       netip.Addr   `json:"dns"`
	// DNSBound is how long the forwarder may take to answer.
	DNSBound time.Duration `json:"dns_bound"`
	// Mode "allowlist": the sandbox's own network namespace routes only
	// to the egress proxy. Every Deny prefix (the policy's denies and
	// allows and both halves of the address space) must then be
	// unreachable, and Proxy must accept a TCP connect; there is no
	// gateway or DNS forwarder to check.
	Mode  string         `json:"mode,omitempty"`
	Proxy netip.AddrPort `json:"proxy,omitzero"`
}

// ModeAllowlist is Spec.Mode of the allowlist network mode.
const ModeAllowlist = "allowlist"

// Route is the observed source address for one prefix's probe address.
type Route struct {
	Prefix netip.Prefix `json:"prefix"`
	Probe  netip.Addr   `json:"probe"`
	Source netip.Addr   `json:"source,omitzero"`
	// Refused is how a denied destination answered a TCP connect when it
	// is answered locally (fail-fast): "refused" within RefusedMillis.
	Refused       string `json:"refused,omitempty"`
	RefusedMillis int64  `json:"refused_ms,omitempty"`
	Error         string `json:"error,omitempty"`
}

// Report is what the probe observed.
type Report struct {
	Version     int     `json:"version"`
	Fingerprint string  `json:"fingerprint"`
	Deny        []Route `json:"deny"`
	Allow       []Route `json:"allow"`
	// GatewaySource is the source address toward the gateway (the tap's
	// when the helper's connected route was imported).
	GatewaySource netip.Addr `json:"gateway_source,omitzero"`
	// Gateway is how the gateway answered a TCP connect: "refused",
	// "unreachable" (an ICMP error from the helper: slirp4netns answers a
	// connect to its host-loopback address so when host loopback is
	// disabled), "connected", or the error.
	Gateway     string `json:"gateway"`
	DNSAnswered bool   `json:"dns_answered"`
	DNSRcode    int    `json:"dns_rcode"`
	DNSMillis   int64  `json:"dns_ms"`
	DNSError    string `json:"dns_error,omitempty"`
	// Proxy is how the egress proxy answered a TCP connect (allowlist).
	Proxy string `json:"proxy,omitempty"`
}

// EncodeSpec is the spec as one argument word (base64 of JSON).
func EncodeSpec(s Spec) (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// DecodeSpec reverses EncodeSpec.
func DecodeSpec(word string) (Spec, error) {
	var s Spec
	b, err := base64.RawURLEncoding.DecodeString(word)
	if err != nil {
		return s, fmt.Errorf("network probe spec: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("network probe spec: %w", err)
	}
	if s.Version != Version {
		return s, fmt.Errorf("network probe spec version %d is not %d", s.Version, Version)
	}
	return s, nil
}

// Line is the report as the init prints it.
func (r Report) Line() string {
	b, _ := json.Marshal(r)
	return LinePrefix + string(b)
}

// ParseLine parses a report line (bounded by the caller's line reader).
func ParseLine(line string) (Report, error) {
	var r Report
	rest, ok := strings.CutPrefix(line, LinePrefix)
	if !ok {
		return r, errors.New("not a network probe report line")
	}
	if err := json.Unmarshal([]byte(rest), &r); err != nil {
		return r, fmt.Errorf("network probe report: %w", err)
	}
	if r.Version != Version {
		return r, fmt.Errorf("network probe report version %d is not %d", r.Version, Version)
	}
	return r, nil
}

// ProbeAddress picks an address inside p that no more specific entry of
// others (nor the connected subnet) covers, so the probe exercises exactly
// p's route. ok is false when p is entirely shadowed.
func ProbeAddress(p netip.Prefix, others []netip.Prefix, connected netip.Prefix) (netip.Addr, bool) {
	shadowed := func(a netip.Addr) bool {
		if connected.IsValid() && connected.Contains(a) {
			return true
		}
		for _, o := range others {
			if o != p && o.Bits() > p.Bits() && o.Contains(a) {
				return true
			}
		}
		return false
	}
	base := p.Masked().Addr()
	size := uint64(1) << (32 - p.Bits())
	b4 := base.As4()
	start := uint64(binary.BigEndian.Uint32(b4[:]))
	// Try a spread of offsets: 1, the middle, the last but one, then a scan
	// in coarse steps; /32 and /31 probe their own first address.
	var offsets []uint64
	if size <= 2 {
		offsets = []uint64{0}
	} else {
		offsets = []uint64{1, size / 2, size - 2}
		step := size / 64
		if step == 0 {
			step = 1
		}
		for o := uint64(1); o < size-1; o += step {
			offsets = append(offsets, o)
		}
	}
	var fallback netip.Addr
	for _, o := range offsets {
		var a4 [4]byte
		binary.BigEndian.PutUint32(a4[:], uint32(start+o))
		a := netip.AddrFrom4(a4)
		if shadowed(a) {
			continue
		}
		if !unroutable(a) {
			return a, true
		}
		if !fallback.IsValid() {
			fallback = a
		}
	}
	return fallback, fallback.IsValid()
}

// unroutableSpace is where a destination does not take the routing table's
// path in the sandbox's network stack: "this network" (0/8: gVisor picks
// an unrelated source for it), loopback, multicast and the reserved and
// broadcast space. A probe there says nothing about the prefix's route, so
// ProbeAddress avoids it unless the prefix holds nothing else (a deny of
// 0.0.0.0/1 is probed at 64.0.0.0, not 0.0.0.1).
var unroutableSpace = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

func unroutable(a netip.Addr) bool {
	for _, p := range unroutableSpace {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Run executes the probe in the caller's network view.
//
// It runs on the calling thread alone, with plain socket calls (socket.go)
// and no goroutines: in the init it is a fresh process's first network
// use inside gVisor, on the path to the Domain's publication, where Go's
// dialer (a netpoller registration, socket options and address queries
// per connect, each a system call the sentry serves) and a goroutine per
// probe cost more than the probes' own round trips. The DNS query goes out
// first so that its round trip through the helper's forwarder overlaps the
// route checks; every connect is then begun at once and one wait collects
// all answers.
func Run(ctx context.Context, s Spec) Report {
	r := Report{Version: Version, Fingerprint: s.Fingerprint}
	if s.Mode == ModeAllowlist {
		for _, p := range s.Deny {
			r.Deny = append(r.Deny, routeOf(p, s.Deny, s.Connected))
		}
		w := newWait(ctx)
		proxy := w.connect(s.Proxy, 2*time.Second)
		w.run()
		r.Proxy = proxy.answer()
		return r
	}
	all := append(append([]netip.Prefix(nil), s.Deny...), s.Allow...)
	w := newWait(ctx)
	dns := w.query(s.DNS, s.DNSBound)
	if len(s.Deny) > 0 {
		r.Deny = make([]Route, len(s.Deny))
	}
	refused := make([]*connectProbe, len(s.Deny))
	for i, p := range s.Deny {
		r.Deny[i] = routeOf(p, all, s.Connected)
		if rt := r.Deny[i]; rt.Error == "" && rt.Source == rt.Probe {
			// Answered on lo (the fail-fast address space): only then is a
			// connect safe to try — it cannot leave the sandbox.
			refused[i] = w.connect(netip.AddrPortFrom(rt.Probe, 9), time.Second)
		}
	}
	for _, p := range s.Allow {
		r.Allow = append(r.Allow, routeOf(p, all, s.Connected))
	}
	if src, err := SourceFor(s.Gateway); err == nil {
		r.GatewaySource = src
	}
	// With host loopback disabled slirp4netns answers a connect to its
	// gateway at once with an ICMP network-unreachable error (measured);
	// with the route to the gateway proven present (GatewaySource), that
	// error can only have come from the helper.
	gw := w.connect(netip.AddrPortFrom(s.Gateway, 9), 2*time.Second)
	w.run()
	for i, c := range refused {
		if c != nil {
			r.Deny[i].Refused, r.Deny[i].RefusedMillis = c.answer(), c.ms
		}
	}
	r.Gateway = gw.answer()
	if errors.Is(gw.err, unix.ENETUNREACH) {
		r.Gateway = "unreachable"
	}
	r.DNSMillis = dns.ms
	if dns.err != nil {
		r.DNSError = dns.err.Error()
	} else {
		r.DNSAnswered, r.DNSRcode = true, dns.rcode
	}
	return r
}

func routeOf(p netip.Prefix, all []netip.Prefix, connected netip.Prefix) Route {
	rt := Route{Prefix: p}
	a, ok := ProbeAddress(p, all, connected)
	if !ok {
		rt.Error = "every address is covered by a more specific entry"
		return rt
	}
	rt.Probe = a
	src, err := SourceFor(a)
	if err != nil {
		rt.Error = err.Error()
		return rt
	}
	rt.Source = src
	return rt
}

// QueryDNS sends one A query for a random name under lazaret.invalid to
// server:53 and waits at most bound for a well-formed reply with the same
// ID. It returns the reply's rcode.
func QueryDNS(ctx context.Context, server netip.Addr, bound time.Duration) (int, error) {
	w := newWait(ctx)
	q := w.query(server, bound)
	w.run()
	return q.rcode, q.err
}

// newQuery is one DNS query's ID and wire form, for a random name under
// lazaret.invalid.
func newQuery() (uint16, []byte) {
	var idb [2]byte
	var label [6]byte
	rand.Read(idb[:])
	rand.Read(label[:])
	id := binary.BigEndian.Uint16(idb[:])
	return id, BuildQuery(id, "probe-"+hex.EncodeToString(label[:])+".lazaret.invalid")
}

// BuildQuery encodes a recursive A/IN query.
func BuildQuery(id uint16, name string) []byte {
	b := make([]byte, 12, 64)
	binary.BigEndian.PutUint16(b[0:], id)
	binary.BigEndian.PutUint16(b[2:], 0x0100) // RD
	binary.BigEndian.PutUint16(b[4:], 1)      // QDCOUNT
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0, 0, 1, 0, 1) // root, QTYPE A, QCLASS IN
	return b
}

// ParseReply checks that msg is a response to query id and returns its
// rcode.
func ParseReply(msg []byte, id uint16) (int, error) {
	if len(msg) < 12 {
		return 0, errors.New("DNS reply shorter than a header")
	}
	if binary.BigEndian.Uint16(msg[0:]) != id {
		return 0, errors.New("DNS reply for another query")
	}
	if msg[2]&0x80 == 0 {
		return 0, errors.New("DNS message is not a response")
	}
	return int(msg[3] & 0x0f), nil
}
