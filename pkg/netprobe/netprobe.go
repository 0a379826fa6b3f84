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
// The package is pure Go networking and linked into the in-sandbox binary,
// so it imports nothing host-side.
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
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"
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
func Run(ctx context.Context, s Spec) Report {
	r := Report{Version: Version, Fingerprint: s.Fingerprint}
	if s.Mode == ModeAllowlist {
		for _, p := range s.Deny {
			r.Deny = append(r.Deny, routeOf(p, s.Deny, s.Connected))
		}
		r.Proxy, _ = connectAnswerAt(ctx, s.Proxy, 2*time.Second)
		return r
	}
	all := append(append([]netip.Prefix(nil), s.Deny...), s.Allow...)
	type dnsResult struct {
		rcode int
		ms    int64
		err   error
	}
	dnsDone := make(chan dnsResult, 1)
	go func() {
		t := time.Now()
		rc, err := QueryDNS(ctx, s.DNS, s.DNSBound)
		dnsDone <- dnsResult{rc, time.Since(t).Milliseconds(), err}
	}()
	// Every deny prefix and the gateway are probed at once, each on its
	// own goroutine (the report keeps the spec's order): no probe waits
	// for a timeout, but the sandbox's first connects each cost a few
	// milliseconds, and this runs on the path to the Domain's publication.
	var wg sync.WaitGroup
	if len(s.Deny) > 0 {
		r.Deny = make([]Route, len(s.Deny))
	}
	for i, p := range s.Deny {
		wg.Go(func() {
			rt := routeOf(p, all, s.Connected)
			if rt.Error == "" && rt.Source == rt.Probe {
				// Answered on lo (the fail-fast address space): only then is a
				// connect safe to try — it cannot leave the sandbox.
				rt.Refused, rt.RefusedMillis = connectAnswer(ctx, rt.Probe, time.Second)
			}
			r.Deny[i] = rt
		})
	}
	var gwSource netip.Addr
	var gw string
	wg.Go(func() {
		if src, err := SourceFor(s.Gateway); err == nil {
			gwSource = src
		}
		gw = gatewayAnswer(ctx, s.Gateway)
	})
	for _, p := range s.Allow {
		r.Allow = append(r.Allow, routeOf(p, all, s.Connected))
	}
	wg.Wait()
	r.GatewaySource, r.Gateway = gwSource, gw
	d := <-dnsDone
	r.DNSMillis = d.ms
	if d.err != nil {
		r.DNSError = d.err.Error()
	} else {
		r.DNSAnswered, r.DNSRcode = true, d.rcode
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

// SourceFor is the source address the network stack picks for a UDP
// "connection" to dst. No packet is sent.
func SourceFor(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// connectAnswer connects to a's discard port and says how it was answered
// and how fast.
func connectAnswer(ctx context.Context, a netip.Addr, bound time.Duration) (string, int64) {
	return connectAnswerAt(ctx, netip.AddrPortFrom(a, 9), bound)
}

func connectAnswerAt(ctx context.Context, ap netip.AddrPort, bound time.Duration) (string, int64) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp4", ap.String())
	ms := time.Since(start).Milliseconds()
	switch {
	case err == nil:
		c.Close()
		return "connected", ms
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused", ms
	}
	return err.Error(), ms
}

// gatewayAnswer connects to the gateway's discard port. With host loopback
// disabled slirp4netns answers at once with an ICMP network-unreachable
// error (measured); with the route to the gateway proven present
// (GatewaySource), that error can only have come from the helper.
func gatewayAnswer(ctx context.Context, gw netip.Addr) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp4", netip.AddrPortFrom(gw, 9).String())
	if err == nil {
		c.Close()
		return "connected"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "refused"
	}
	if errors.Is(err, syscall.ENETUNREACH) {
		return "unreachable"
	}
	return err.Error()
}

// QueryDNS sends one A query for a random name under lazaret.invalid to
// server:53 and waits at most bound for a well-formed reply with the same
// ID. It returns the reply's rcode.
func QueryDNS(ctx context.Context, server netip.Addr, bound time.Duration) (int, error) {
	if !server.IsValid() {
		return 0, errors.New("no DNS forwarder")
	}
	var idb [2]byte
	var label [6]byte
	rand.Read(idb[:])
	rand.Read(label[:])
	id := binary.BigEndian.Uint16(idb[:])
	name := "probe-" + hex.EncodeToString(label[:]) + ".lazaret.invalid"
	q := BuildQuery(id, name)
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(server, 53)))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	deadline := time.Now().Add(bound)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	if _, err := c.Write(q); err != nil {
		return 0, err
	}
	buf := make([]byte, 1500)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, err
		}
		rc, err := ParseReply(buf[:n], id)
		if err == nil {
			return rc, nil
		}
	}
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
