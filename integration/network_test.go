package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The network tests send traffic only to loopback and to test hosts in a
// network namespace they create themselves (addresses in 10/8, 172.16/12,
// 192.168/16 and 198.18/15, with a random third octet so concurrent runs do
// not collide). slirp4netns's traffic leaves through the host network
// namespace and reaches the test host over a veth pair.

const netServerEnv = "LAZARET_IT_NETSERVER"

// testNet is one test host: a network namespace with addresses in each
// range and a small TCP/UDP/DNS server inside.
type testNet struct {
	x                int // the random third octet
	permitted        string
	denied           map[string]string // name -> address (default denies)
	allowed          string            // inside 10/8, allowed by the profile
	profileDenied    string            // inside 198.18/15, denied by the profile
	dnsName, dnsAddr string            // the unique name and its answer
	pinnedName       string            // an allow_hosts name, answered with pinned
	pinned           string            // inside 10/8, allowed only by host name
	mu               sync.Mutex
	arrivals         []string
}

func (n *testNet) addr(prefix string) string { return fmt.Sprintf(prefix, n.x) }

func newTestNet(t *testing.T) *testNet {
	t.Helper()
	n := &testNet{x: testHostOctet()}
	n.permitted = n.addr("198.18.%d.2")
	n.profileDenied = n.addr("198.19.%d.2")
	n.allowed = n.addr("10.78.%d.2")
	n.denied = map[string]string{"10/8": n.addr("10.77.%d.2"), "172.16/12": n.addr("172.16.%d.2"), "192.168/16": n.addr("192.168.%d.2")}
	n.dnsName = "unique-" + randHex(4) + ".lazaret-test"
	n.dnsAddr = n.addr("198.18.%d.77")
	n.pinnedName = "pinned-" + randHex(4) + ".lazaret-test"
	n.pinned = n.addr("10.79.%d.2")
	hosts := []string{n.permitted, n.profileDenied, n.allowed, n.pinned, n.denied["10/8"], n.denied["172.16/12"], n.denied["192.168/16"]}
	cfg := strings.Join([]string{strings.Join(hosts, ","), n.permitted, n.dnsName + "=" + n.dnsAddr + "," + n.pinnedName + "=" + n.pinned}, ";")
	serveOnTestHost(t, hosts, netServerEnv, cfg, func(line string) {
		n.mu.Lock()
		n.arrivals = append(n.arrivals, line)
		n.mu.Unlock()
	})
	return n
}

// testHostOctets hands out the third octet X of test-host addresses
// (198.18.X.2, 10.77.X.2, …): unique within this test process, so the
// host-side /24s of scenarios running side by side never clash. The first
// is chosen by time, so a run's addresses differ from the last run's.
var testHostOctets struct {
	sync.Mutex
	next int
}

// testHostOctet is the next unused third octet, in 10–253.
func testHostOctet() int {
	testHostOctets.Lock()
	defer testHostOctets.Unlock()
	if testHostOctets.next == 0 {
		testHostOctets.next = 10 + int(time.Now().UnixNano()%244)
	}
	x := testHostOctets.next
	testHostOctets.next = 10 + (x-10+1)%244
	return x
}

// serveOnTestHost creates a network namespace with the addresses hosts
// (each A.B.C.D/24, the host side of the veth pair holding A.B.C.1/24),
// runs this test binary inside it with envVar=cfg (TestMain then runs the
// server that envVar selects), waits for the server's "ready" line and
// hands every later line of its stdout to onLine. Several hosts may share
// a /24 (the host side gets its .1 once). It returns the namespace's name
// (for `ip netns exec`). Cleanup stops the server and removes the
// namespace and the link.
func serveOnTestHost(t *testing.T, hosts []string, envVar, cfg string, onLine func(string)) string {
	t.Helper()
	ns, hostIf, peer := "lzt-"+randHex(3), "lzh"+randHex(3), "lzp"+randHex(3)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", ns)
	var server *exec.Cmd
	t.Cleanup(func() {
		if server != nil && server.Process != nil {
			server.Process.Kill() // the server this test started, by its pid
			server.Wait()
		}
		exec.Command("ip", "link", "del", hostIf).Run()
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("test host namespace %s left behind: ip netns del: %v: %s", ns, err, out)
		}
	})
	run("link", "add", hostIf, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", ns)
	hostSide := map[string]bool{}
	for _, h := range hosts {
		pfx := h[:strings.LastIndex(h, ".")]
		if !hostSide[pfx] {
			hostSide[pfx] = true
			run("addr", "add", pfx+".1/24", "dev", hostIf)
		}
		run("-n", ns, "addr", "add", h+"/24", "dev", peer)
	}
	run("link", "set", hostIf, "up")
	run("-n", ns, "link", "set", peer, "up")
	run("-n", ns, "link", "set", "lo", "up")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	server = exec.Command("ip", "netns", "exec", ns, exe)
	server.Env = append(os.Environ(), envVar+"="+cfg)
	out, _ := server.StdoutPipe()
	server.Stderr = os.Stderr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		isReady := false
		for sc.Scan() {
			if !isReady && sc.Text() == "ready" {
				isReady = true
				close(ready)
				continue
			}
			onLine(sc.Text())
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("the test host's server (%s) did not start", envVar)
	}
	return ns
}

// arrivedAt lists the arrivals recorded for address a.
func (n *testNet) arrivedAt(a string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, l := range n.arrivals {
		if strings.Contains(l, " "+a+" ") {
			out = append(out, l)
		}
	}
	return out
}

// runNetServer is the test host's server (TestMain runs it when the
// harness starts this binary inside the test network namespace): TCP and
// UDP on port 7777 of every address, reporting each arrival on stdout, and
// a DNS server that answers exactly one name.
func runNetServer(cfg string) {
	parts := strings.Split(cfg, ";")
	addrs, dnsAt := strings.Split(parts[0], ","), parts[1]
	answers := map[string]string{}
	for _, kv := range strings.Split(parts[2], ",") {
		k, v, _ := strings.Cut(kv, "=")
		answers[k] = v
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf(format+"\n", args...)
		mu.Unlock()
	}
	for _, a := range addrs {
		l, err := net.Listen("tcp4", a+":7777")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func(a string) {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				say("tcp %s from %s", a, c.RemoteAddr())
				go func() {
					fmt.Fprintf(c, "hello from %s\n", a)
					start := time.Now()
					n, _ := io.Copy(io.Discard, c) // throughput sink
					if n > 0 {
						say("tcp-done %s %d %d", a, n, time.Since(start).Microseconds())
					}
					c.Close()
				}()
			}
		}(a)
		u, err := net.ListenPacket("udp4", a+":7777")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func(a string) {
			b := make([]byte, 2048)
			for {
				k, from, err := u.ReadFrom(b)
				if err != nil {
					return
				}
				say("udp %s from %s: %q", a, from, b[:k])
			}
		}(a)
	}
	d, err := net.ListenPacket("udp4", dnsAt+":53")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go serveDNS(d, answers, func(q string) { say("dns %s query %s", dnsAt, q) })
	say("ready")
	select {}
}

// serveDNS answers A queries for the names of answers, everything else
// NXDOMAIN.
func serveDNS(c net.PacketConn, answers map[string]string, log func(string)) {
	b := make([]byte, 1500)
	for {
		k, from, err := c.ReadFrom(b)
		if err != nil {
			return
		}
		q := b[:k]
		if len(q) < 12 {
			continue
		}
		// Parse the question name.
		var labels []string
		i := 12
		for i < len(q) && q[i] != 0 {
			l := int(q[i])
			if i+1+l > len(q) {
				break
			}
			labels = append(labels, string(q[i+1:i+1+l]))
			i += 1 + l
		}
		end := i + 5
		if end > len(q) {
			continue
		}
		qname := strings.Join(labels, ".")
		qtype := binary.BigEndian.Uint16(q[i+1:])
		log(qname)
		resp := append([]byte(nil), q[:end]...)
		resp[2] = 0x81 // QR, RD
		resp[3] = 0x80 // RA
		binary.BigEndian.PutUint16(resp[6:], 0)
		binary.BigEndian.PutUint16(resp[8:], 0)
		binary.BigEndian.PutUint16(resp[10:], 0)
		answer, known := answers[strings.ToLower(qname)]
		if known && qtype == 1 {
			binary.BigEndian.PutUint16(resp[6:], 1)
			ip := net.ParseIP(answer).To4()
			resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4)
			resp = append(resp, ip...)
		} else if !known {
			resp[3] |= 3 // NXDOMAIN
		}
		c.WriteTo(resp, from)
	}
}

// TestSpec36ControlledEgress (spec §3.6, FR-19, SR-6): default RFC 1918
// deny (no packet reaches the test host), 198.18 permitted, a more specific
// allow inside 10/8, a configured deny inside 198.18/15, DNS through the
// connectivity helper to the profile's resolver (the unique answer), host
// loopback services unreachable, IPv6 absent, and no route change inside.
func TestSpec36ControlledEgress(t *testing.T) {
	parallel(t)
	e := need(t)
	n := newTestNet(t)
	// Host loopback service: must stay unreachable from the sandbox.
	lo, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Close()
	var loHits sync.WaitGroup
	loConns := 0
	loHits.Add(1)
	go func() {
		defer loHits.Done()
		for {
			c, err := lo.Accept()
			if err != nil {
				return
			}
			loConns++
			c.Close()
		}
	}()
	loPort := lo.Addr().(*net.TCPAddr).Port
	cfg := userConfig(t, e, fmt.Sprintf(`[profiles.nettest]
image = "debian"
network.allow = ["%s/24"]
network.allow_hosts = ["%s"]
network.deny = ["%s/24"]
network.dns = ["%s"]
`, n.addr("10.78.%d.0"), n.pinnedName, n.addr("198.19.%d.0"), n.permitted))
	ws := workspace(t)
	// One sandbox session runs every probe; each reports one line.
	tcp := func(label, host string, port int) string {
		return fmt.Sprintf(`if out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d && head -n1 <&3' 2>&1); then echo "%s ok $out"; else echo "%s fail $out"; fi; `, host, port, label, label)
	}
	udp := func(label, host string) string {
		return fmt.Sprintf(`echo %s > /dev/udp/%s/7777 2>/dev/null; `, label, host)
	}
	script := tcp("permitted", n.permitted, 7777) + tcp("allowed", n.allowed, 7777) + tcp("pinned", n.pinned, 7777) + tcp("profile-denied", n.profileDenied, 7777)
	for name, a := range n.denied {
		script += tcp("denied-"+name, a, 7777) + udp("udp-denied-"+strings.ReplaceAll(name, "/", "_"), a)
	}
	script += udp("udp-permitted", n.permitted) + udp("udp-profile-denied", n.profileDenied)
	script += tcp("gateway-loopback", "10.0.2.2", loPort) + tcp("own-loopback", "127.0.0.1", loPort)
	script += fmt.Sprintf(`echo "dns $(getent ahostsv4 %s | head -n1 | cut -d' ' -f1)"; `, n.dnsName)
	script += `echo "ipv6 $(cat /proc/net/if_inet6 2>/dev/null | wc -l)"; `
	script += `echo "resolv $(grep ^nameserver /etc/resolv.conf)"; `
	start := time.Now()
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "nettest", "--", "bash", "-c", script)
	t.Logf("probes took %s; output:\n%s", time.Since(start), r.stdout)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	got := probeLines(r.stdout)
	expectOK := func(label, addr string) {
		if v := got[label]; !strings.HasPrefix(v, "ok hello from "+addr) {
			t.Errorf("%s (%s): %q, want a reply from the test host", label, addr, v)
		}
	}
	expectOK("permitted", n.permitted)
	expectOK("allowed", n.allowed)
	expectOK("pinned", n.pinned) // network.allow_hosts, resolved by HC at start
	for _, label := range []string{"profile-denied", "denied-10/8", "denied-172.16/12", "denied-192.168/16", "gateway-loopback", "own-loopback"} {
		if v := got[label]; !strings.HasPrefix(v, "fail") {
			t.Errorf("%s: %q, want the connection to fail", label, v)
		}
	}
	// Denied connections fail fast: refused inside the sandbox (the
	// fail-fast address space on lo), not a silent timeout.
	for _, label := range []string{"profile-denied", "denied-10/8", "denied-172.16/12", "denied-192.168/16"} {
		if v := got[label]; !strings.Contains(v, "Connection refused") {
			t.Errorf("%s: %q, want a local refusal (fail fast)", label, v)
		}
	}
	if got["dns"] != n.dnsAddr {
		t.Errorf("DNS through the helper answered %q for %s, want the test resolver's unique %s", got["dns"], n.dnsName, n.dnsAddr)
	}
	if got["ipv6"] != "0" {
		t.Errorf("IPv6 addresses in the sandbox: %q", got["ipv6"])
	}
	if got["resolv"] != "nameserver 10.0.2.3" {
		t.Errorf("sandbox resolv.conf: %q", got["resolv"])
	}
	time.Sleep(300 * time.Millisecond) // let the server report late arrivals
	for _, a := range append([]string{n.profileDenied}, n.denied["10/8"], n.denied["172.16/12"], n.denied["192.168/16"]) {
		if arr := n.arrivedAt(a); len(arr) > 0 {
			t.Errorf("packets reached denied test address %s: %v", a, arr)
		}
	}
	if arr := n.arrivedAt(n.permitted); len(arr) < 2 {
		t.Errorf("permitted address %s saw %v, want the TCP connection and the UDP datagram", n.permitted, arr)
	}
	lo.Close()
	loHits.Wait()
	if loConns != 0 {
		t.Errorf("host loopback service got %d connections from the sandbox", loConns)
	}
	// No route change inside (CAP_NET_ADMIN is not in the sandbox's sets).
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "ip route add 203.0.113.0/24 via 127.0.0.1 dev lo; echo rc=$?")
	if !strings.Contains(r.stdout, "rc=") || strings.Contains(r.stdout, "rc=0") {
		t.Errorf("route change inside the sandbox: %+v", r)
	}
	noLeftovers(t)
	allClean(t, ws, "nettest")
}

// TestSpec36EqualPrefixConflict: an allow and a deny of the same prefix is
// refused at config check, naming both entries.
func TestSpec36EqualPrefixConflict(t *testing.T) {
	parallel(t)
	e := need(t)
	cfg := userConfig(t, e, "[profiles.clash]\nnetwork.allow = [\"198.18.5.0/24\"]\nnetwork.deny = [\"198.18.5.0/24\"]\n[profiles.rfc]\nnetwork.allow = [\"10.0.0.0/8\"]\n")
	ws := workspace(t)
	r := lz(t, ws, nil, "config", "check", "--config", cfg)
	if r.code == 0 {
		t.Fatalf("config check accepted an equal-prefix conflict: %+v", r)
	}
	for _, want := range []string{"198.18.5.0/24 is both allowed (line 2) and denied (line 3)", "10.0.0.0/8 is both allowed (line 5) and denied (built-in default deny)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("config check message lacks %q:\n%s", want, r.stderr)
		}
	}
	t.Logf("config check: %s", r.stderr)
}

// helperProcesses lists the pids of the scenario's own (ownProcs)
// slirp4netns processes of the test user.
func helperProcesses(t *testing.T) []int {
	t.Helper()
	e := need(t)
	var out []int
	for _, up := range ownProcs(e, t) {
		if up.uid == e.uid && len(up.args) > 0 && strings.Contains(up.args[0], "slirp4netns") {
			out = append(out, up.pid)
		}
	}
	return out
}

// tcpRTT measures a TCP connect+first-line round trip from the host.
func tcpRTT(ctx context.Context, addr string) (time.Duration, error) {
	start := time.Now()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp4", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	bufio.NewReader(c).ReadString('\n')
	return time.Since(start), nil
}

// TestSpec36OfflineHostStillStarts (FR-20): when the Domain's resolver does
// not answer (an offline host), the readiness probe records the DNS failure
// as a warning and the Domain still starts; deny and permit are still
// proven. The silent resolver is a test host address with no DNS server.
func TestSpec36OfflineHostStillStarts(t *testing.T) {
	parallel(t)
	e := need(t)
	n := newTestNet(t)
	cfg := userConfig(t, e, fmt.Sprintf("[profiles.offline]\nimage = \"busybox\"\nnetwork.dns = [\"%s\"]\n", n.profileDenied))
	ws := workspace(t)
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "offline", "--", "echo", "started")
	if r.code != 0 || r.stdout != "started\n" {
		t.Fatalf("an offline host must still start: %+v", r)
	}
	t.Logf("stderr: %s", r.stderr)
	if !strings.Contains(r.stderr, "DNS forwarder 10.0.2.3 did not answer") {
		t.Errorf("no DNS warning on stderr: %q", r.stderr)
	}
	noLeftovers(t)
	allClean(t, ws, "offline")
}

// TestSpec36NameServiceFilesEachGeneration: the generation's resolv.conf,
// hosts and hostname are what the guest reads at every start, whatever the
// /etc State Anchor kept. RS binds them over the anchor's files (creating
// a missing one, as runsc would), so runsc mounts none of them; a sandbox
// may then edit them in place (`sed -i` replaces the file in the anchor),
// remove one or put a symlink or a directory in its place, and the next
// generation still reads its own and starts: a missing file is made
// again, a symlink replaced, a directory moved aside with a warning.
func TestSpec36NameServiceFilesEachGeneration(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	read := `echo "resolv $(grep -c '^# Lazaret' /etc/resolv.conf)"; echo "hostname $(cat /etc/hostname)"; ` +
		`echo "hosts $(grep -c "$(cat /etc/hostname)" /etc/hosts) $(grep -c extra /etc/hosts)"; ` +
		`echo "mounts $(grep -c -e ' /etc/hosts ' -e ' /etc/hostname ' -e ' /etc/resolv.conf ' /proc/self/mountinfo)"; `
	parse := func(r result) map[string]string {
		t.Helper()
		if r.code != 0 {
			t.Fatalf("run: %+v", r)
		}
		return probeLines(r.stdout)
	}
	first := parse(lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", read+
		`sed -i '$a 10.9.9.9 extra' /etc/hosts && echo "edited $(grep -c extra /etc/hosts)"; `+
		`rm /etc/hostname && echo removed yes; ln -sf /tmp/elsewhere /etc/resolv.conf && echo linked yes; `+
		`rm /etc/hosts && mkdir /etc/hosts && echo kept > /etc/hosts/mine && echo dir yes`))
	t.Logf("first generation: %v", first)
	if first["resolv"] != "1" || first["hostname"] == "" || first["hosts"] != "1 0" {
		t.Errorf("first generation reads %v, want the generation's files", first)
	}
	if first["mounts"] != "0" {
		t.Errorf("%s of the name-service files are mounts of their own; RS binds them beneath the /etc anchor", first["mounts"])
	}
	if first["edited"] != "1" || first["removed"] != "yes" || first["linked"] != "yes" || first["dir"] != "yes" {
		t.Errorf("editing, removing or replacing a name-service file failed: %v", first)
	}
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", read+`echo "link $(readlink /etc/resolv.conf)"; echo "moved $(cat /etc/hosts.lazaret-moved/mine)"`)
	second := parse(r)
	t.Logf("second generation: %v", second)
	if second["resolv"] != "1" || second["hostname"] != first["hostname"] || second["hosts"] != "1 0" || second["mounts"] != "0" {
		t.Errorf("second generation reads %v, want its own files (not the first's edits), bound beneath the anchor", second)
	}
	if second["link"] != "" {
		t.Errorf("/etc/resolv.conf is still the sandbox's symlink to %q", second["link"])
	}
	if second["moved"] != "kept" || !strings.Contains(r.stderr, "warning: /etc/hosts was a directory") {
		t.Errorf("the sandbox's directory at /etc/hosts was not moved aside with a note: %v, stderr %q", second, r.stderr)
	}
	// Without the /etc anchor the files lie on the root's overlay: runsc
	// mounts them, as before.
	cfg := userConfig(t, e, "[profiles.bare]\nimage = \"busybox\"\ndefault_persistent_paths = false\n")
	bare := parse(lz(t, ws, nil, "run", "--config", cfg, "-p", "bare", "--", "sh", "-c", read))
	t.Logf("no State Anchors: %v", bare)
	if bare["resolv"] != "1" || bare["hostname"] != first["hostname"] || bare["hosts"] != "1 0" || bare["mounts"] != "3" {
		t.Errorf("without State Anchors the sandbox reads %v, want the generation's files mounted by runsc", bare)
	}
	noLeftovers(t)
	allClean(t, ws, "tiny")
	allClean(t, ws, "bare")
}
