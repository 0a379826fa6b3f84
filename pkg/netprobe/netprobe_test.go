package netprobe

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func testSpec() Spec {
	return Spec{Version: Version, Fingerprint: "ab12", Deny: []netip.Prefix{pfx("10.0.0.0/8"), pfx("172.16.0.0/12")},
		Allow: []netip.Prefix{pfx("10.78.0.0/24")}, Connected: pfx("10.0.2.0/24"), Gateway: addr("10.0.2.2"),
		Guest: addr("10.0.2.100"), DNS: addr("10.0.2.3"), DNSBound: time.Second}
}

func TestProbeAddressAvoidsMoreSpecificEntries(t *testing.T) {
	all := []netip.Prefix{pfx("10.0.0.0/8"), pfx("10.0.0.0/9"), pfx("10.128.0.0/9")}
	if _, ok := ProbeAddress(pfx("10.0.0.0/8"), all, netip.Prefix{}); ok {
		t.Fatal("a fully shadowed prefix must have no probe address")
	}
	a, ok := ProbeAddress(pfx("10.0.0.0/8"), []netip.Prefix{pfx("10.0.0.0/8"), pfx("10.0.0.0/24")}, pfx("10.0.2.0/24"))
	if !ok || pfx("10.0.0.0/24").Contains(a) || !pfx("10.0.0.0/8").Contains(a) {
		t.Fatalf("probe address %v", a)
	}
	if a, ok := ProbeAddress(pfx("198.18.7.7/32"), nil, netip.Prefix{}); !ok || a != addr("198.18.7.7") {
		t.Fatalf("/32 probe address %v %v", a, ok)
	}
}

// TestProbeAddressAvoidsUnroutableSpace: a deny that covers "this
// network", loopback or multicast is probed at an ordinary address of it;
// a prefix with nothing else still gets a probe.
func TestProbeAddressAvoidsUnroutableSpace(t *testing.T) {
	for _, c := range []struct{ prefix, want string }{
		{"0.0.0.0/1", "64.0.0.0"},
		{"0.0.0.0/0", "128.0.0.0"},
		{"128.0.0.0/1", "128.0.0.1"},
		{"192.0.0.0/2", "192.0.0.1"},
		{"224.0.0.0/3", "224.0.0.1"},
		{"0.0.0.0/8", "0.0.0.1"},
	} {
		a, ok := ProbeAddress(pfx(c.prefix), []netip.Prefix{pfx(c.prefix)}, pfx("10.0.2.0/24"))
		if !ok || a != addr(c.want) || !pfx(c.prefix).Contains(a) {
			t.Errorf("ProbeAddress(%s) = %v, %v; want %s", c.prefix, a, ok, c.want)
		}
	}
}

func TestSpecRoundTripAndVersion(t *testing.T) {
	w, err := EncodeSpec(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeSpec(w)
	if err != nil || s.Fingerprint != "ab12" || len(s.Deny) != 2 || s.DNSBound != time.Second {
		t.Fatalf("%+v %v", s, err)
	}
	s.Version = 2
	w, _ = EncodeSpec(s)
	if _, err := DecodeSpec(w); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("newer spec accepted: %v", err)
	}
	if _, err := ParseLine("lazaret-netprobe {\"version\":9}"); err == nil {
		t.Fatal("newer report accepted")
	}
	if _, err := ParseLine("garbage"); err == nil {
		t.Fatal("garbage accepted")
	}
}

func goodReport(s Spec) Report {
	r := Report{Version: Version, Fingerprint: s.Fingerprint, Gateway: "unreachable", GatewaySource: s.Guest, DNSAnswered: true, DNSRcode: 3}
	for _, p := range s.Deny {
		a, _ := ProbeAddress(p, append(s.Deny, s.Allow...), s.Connected)
		r.Deny = append(r.Deny, Route{Prefix: p, Probe: a, Source: LoopbackSource})
	}
	for _, p := range s.Allow {
		a, _ := ProbeAddress(p, append(s.Deny, s.Allow...), s.Connected)
		r.Allow = append(r.Allow, Route{Prefix: p, Probe: a, Source: s.Guest})
	}
	return r
}

func TestJudge(t *testing.T) {
	s := testSpec()
	r := goodReport(s)
	if v := Judge(s, r); !v.Ready() || !v.DNSObserved || len(v.Warnings) != 0 {
		t.Fatalf("good report judged %+v", v)
	}
	line := r.Line()
	back, err := ParseLine(line)
	if err != nil || !Judge(s, back).Ready() {
		t.Fatalf("round trip: %v %+v", err, Judge(s, back))
	}
	cases := map[string]func(r *Report){
		"deny leaves via the tap":   func(r *Report) { r.Deny[0].Source = addr("10.0.2.100") },
		"allow leaves via loopback": func(r *Report) { r.Allow[0].Source = LoopbackSource },
		"other generation":          func(r *Report) { r.Fingerprint = "ffff" },
		"missing deny entry":        func(r *Report) { r.Deny = r.Deny[:1] },
		"swapped prefix":            func(r *Report) { r.Deny[0].Prefix = pfx("192.168.0.0/16") },
		"probe outside prefix":      func(r *Report) { r.Deny[0].Probe = addr("8.8.8.8") },
		"gateway silent":            func(r *Report) { r.Gateway = "i/o timeout" },
		"gateway not via the tap":   func(r *Report) { r.GatewaySource = LoopbackSource },
		"probe error":               func(r *Report) { r.Allow[0].Error = "network is unreachable" },
	}
	for name, mut := range cases {
		bad := goodReport(s)
		mut(&bad)
		if v := Judge(s, bad); v.Ready() || len(v.Problems) == 0 {
			t.Errorf("%s: judged ready %+v", name, v)
		}
	}
	ff := goodReport(s)
	for i := range ff.Deny {
		ff.Deny[i].Source, ff.Deny[i].Refused, ff.Deny[i].RefusedMillis = ff.Deny[i].Probe, "refused", 1
	}
	if v := Judge(s, ff); !v.Ready() || len(v.FailFast) != len(s.Deny) {
		t.Fatalf("fail-fast deny judged %+v", v)
	}
	ff.Deny[0].Refused = "i/o timeout"
	if v := Judge(s, ff); v.Ready() {
		t.Fatal("a local deny address that does not refuse was accepted")
	}
	off := goodReport(s)
	off.DNSAnswered, off.DNSError = false, "i/o timeout"
	if v := Judge(s, off); !v.Ready() || v.DNSObserved || len(v.Warnings) != 1 {
		t.Fatalf("offline DNS must warn but stay ready: %+v", v)
	}
}

func TestDNSCodec(t *testing.T) {
	q := BuildQuery(0xbeef, "probe-1.lazaret.invalid")
	if q[0] != 0xbe || q[1] != 0xef || q[5] != 1 {
		t.Fatalf("header %x", q[:12])
	}
	if !strings.Contains(string(q), "\x07probe-1\x07lazaret\x07invalid\x00") {
		t.Fatalf("qname %q", q[12:])
	}
	reply := append([]byte(nil), q...)
	reply[2] |= 0x80
	reply[3] = 0x83
	if rc, err := ParseReply(reply, 0xbeef); err != nil || rc != 3 {
		t.Fatalf("rcode %d %v", rc, err)
	}
	if _, err := ParseReply(reply, 0xbeee); err == nil {
		t.Fatal("reply to another id accepted")
	}
	if _, err := ParseReply(q, 0xbeef); err == nil {
		t.Fatal("a query accepted as a reply")
	}
	if _, err := ParseReply(reply[:5], 0xbeef); err == nil {
		t.Fatal("short reply accepted")
	}
}

// TestJudgeAllowlist: in the allowlist mode every probed prefix must be
// unreachable and the egress proxy must accept; a route anywhere else, a
// missing entry or a silent proxy refuses publication.
func TestJudgeAllowlist(t *testing.T) {
	spec := Spec{Version: Version, Fingerprint: "f", Mode: ModeAllowlist,
		Deny:  []netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1")},
		Proxy: netip.MustParseAddrPort("10.0.3.1:3128")}
	unreachable := func(p string, a string) Route {
		return Route{Prefix: netip.MustParsePrefix(p), Probe: netip.MustParseAddr(a), Error: "dial udp4 " + a + ":9: connect: network is unreachable"}
	}
	good := Report{Version: Version, Fingerprint: "f", Deny: []Route{unreachable("0.0.0.0/1", "64.0.0.1"), unreachable("128.0.0.0/1", "128.0.0.1")}, Proxy: "connected"}
	if v := Judge(spec, good); !v.Ready() || len(v.Warnings) != 0 {
		t.Fatalf("good report: %+v", v)
	}
	routed := good
	routed.Deny = []Route{unreachable("0.0.0.0/1", "64.0.0.1"), {Prefix: netip.MustParsePrefix("128.0.0.0/1"), Probe: netip.MustParseAddr("128.0.0.1"), Source: netip.MustParseAddr("10.0.3.2")}}
	if v := Judge(spec, routed); v.Ready() || !strings.Contains(strings.Join(v.Problems, ";"), "not unreachable") {
		t.Errorf("a routed prefix: %+v", v)
	}
	short := good
	short.Deny = good.Deny[:1]
	if v := Judge(spec, short); v.Ready() {
		t.Errorf("a missing entry: %+v", v)
	}
	silent := good
	silent.Proxy = "connection refused"
	if v := Judge(spec, silent); v.Ready() || !strings.Contains(strings.Join(v.Problems, ";"), "egress proxy") {
		t.Errorf("a silent proxy: %+v", v)
	}
}

// TestRunLoopback runs the probe in this process's network view against
// loopback only. Every connect is begun before the answers are collected;
// the report must still list the prefixes in the spec's order. 127.0.0.0/8's probe,
// 127.0.0.1, is lo's own address, so it is also connected to (on the
// discard port, which nothing here serves); the other prefixes' probes
// answer from 127.0.0.1, not from themselves, so they are not.
func TestRunLoopback(t *testing.T) {
	deny := []netip.Prefix{pfx("127.0.0.0/8"), pfx("127.1.0.0/16"), pfx("127.2.0.0/16"), pfx("127.3.3.0/24")}
	s := Spec{Version: Version, Fingerprint: "cd34", Deny: deny, Gateway: addr("127.0.0.1")}
	r := Run(t.Context(), s)
	if len(r.Deny) != len(deny) {
		t.Fatalf("report lists %d deny probes, want %d: %+v", len(r.Deny), len(deny), r.Deny)
	}
	for i, rt := range r.Deny {
		if rt.Prefix != deny[i] || !deny[i].Contains(rt.Probe) || rt.Error != "" || rt.Source != addr("127.0.0.1") {
			t.Errorf("deny probe %d: %+v, want prefix %s, a probe address inside it and source 127.0.0.1", i, rt, deny[i])
		}
		if connected := rt.Refused != ""; connected != (i == 0) {
			t.Errorf("deny probe %d of %s: answer %q; want a connect only where the probe is the local source", i, deny[i], rt.Refused)
		}
	}
	if r.GatewaySource != addr("127.0.0.1") || r.Gateway == "" {
		t.Errorf("gateway: source %s answer %q, want 127.0.0.1 and an answer", r.GatewaySource, r.Gateway)
	}
	if r.DNSAnswered || r.DNSError == "" {
		t.Errorf("DNS without a forwarder: answered %v, error %q; want not answered and an error", r.DNSAnswered, r.DNSError)
	}
}

// dnsServer serves DNS on a loopback port for the duration of the test
// (dnsPort points the probe at it): answer gets each query and returns the
// datagrams to send back, in order.
func dnsServer(t *testing.T, answer func(q []byte) [][]byte) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	old := dnsPort
	dnsPort = uint16(c.LocalAddr().(*net.UDPAddr).Port)
	t.Cleanup(func() { dnsPort = old })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			for _, m := range answer(append([]byte(nil), buf[:n]...)) {
				c.WriteToUDP(m, from)
			}
		}
	}()
}

// reply is a response to query q with rcode rc; id overrides its ID when
// non-zero, and response false clears the QR bit.
func reply(q []byte, rc byte, id uint16, response bool) []byte {
	m := append([]byte(nil), q...)
	if id != 0 {
		binary.BigEndian.PutUint16(m, id)
	}
	m[2], m[3] = 0x01, rc
	if response {
		m[2] |= 0x80
	}
	return m
}

// TestQueryDNSTakesItsOwnReply: replies for another query and messages
// that are not responses are skipped; the first reply to this query with
// its ID gives the rcode.
func TestQueryDNSTakesItsOwnReply(t *testing.T) {
	dnsServer(t, func(q []byte) [][]byte {
		other := binary.BigEndian.Uint16(q) ^ 0x5555
		return [][]byte{reply(q, 2, other, true), reply(q, 2, 0, false), reply(q, 3, 0, true), reply(q, 5, 0, true)}
	})
	rc, err := QueryDNS(t.Context(), addr("127.0.0.1"), 5*time.Second)
	if err != nil || rc != 3 {
		t.Fatalf("QueryDNS = %d, %v; want rcode 3 (NXDOMAIN) from the matching response", rc, err)
	}
}

// TestQueryDNSWithoutAReply: a forwarder that stays silent is reported
// once the bound has passed, one that is not there at once.
func TestQueryDNSWithoutAReply(t *testing.T) {
	dnsServer(t, func([]byte) [][]byte { return nil })
	if _, err := QueryDNS(t.Context(), addr("127.0.0.1"), 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no reply within 50ms") {
		t.Fatalf("silent forwarder: %v; want no reply within the bound", err)
	}
	// A port nobody serves: loopback answers with port unreachable.
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dnsPort = uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	if _, err := QueryDNS(t.Context(), addr("127.0.0.1"), 5*time.Second); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("no forwarder: %v; want the refusal", err)
	}
	if _, err := QueryDNS(t.Context(), netip.Addr{}, time.Second); err == nil {
		t.Fatal("a query without a forwarder address succeeded")
	}
}

// TestConnectAnswers: a listening port connects, a closed one refuses,
// each within its bound; a destination that is not IPv4 is an error, not
// an answer.
func TestConnectAnswers(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	open := netip.MustParseAddrPort(l.Addr().String())
	c, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := netip.MustParseAddrPort(c.Addr().String())
	c.Close()
	w := newWait(t.Context())
	a, b := w.connect(open, 5*time.Second), w.connect(closed, 5*time.Second)
	v6 := w.connect(netip.MustParseAddrPort("[::1]:9"), 5*time.Second)
	w.run()
	if a.answer() != "connected" || b.answer() != "refused" {
		t.Errorf("listening port answered %q (%v), closed port %q (%v); want connected and refused", a.answer(), a.err, b.answer(), b.err)
	}
	if v6.err == nil || v6.answer() == "connected" || v6.answer() == "refused" {
		t.Errorf("an IPv6 destination answered %q (%v); want an error", v6.answer(), v6.err)
	}
}
