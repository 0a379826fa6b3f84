package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/capability"
	"github.com/lazaret/lazaret/pkg/fdpass"
)

// TestCurlThroughProxy drives the proxy with curl, as tools in the
// sandbox do: https through CONNECT, plain HTTP, socks5h, and a refusal.
func TestCurlThroughProxy(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed for this test: install it (apt-get install curl)")
	}
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls-ok") }))
	defer tlsSrv.Close()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "web-ok %s", r.Host) }))
	defer web.Close()
	px := startProxy(t, policy(t, true, false, "example.com", "web.test"), nil)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw}), 0o600)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c := exec.CommandContext(ctx, curl, append([]string{"-sS", "--noproxy", "", "-w", " %{http_code}"}, args...)...)
		c.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	httpProxy := "http://s-1@" + px.http
	if got := run("--proxy", httpProxy, "--cacert", ca, fmt.Sprintf("https://example.com:%d/", portOf(t, tlsSrv.URL))); got != "tls-ok 200" {
		t.Errorf("https via CONNECT: %q", got)
	}
	if got := run("--proxy", httpProxy, fmt.Sprintf("http://web.test:%d/", portOf(t, web.URL))); got != fmt.Sprintf("web-ok web.test:%d 200", portOf(t, web.URL)) {
		t.Errorf("plain http: %q", got)
	}
	if got := run("-x", "socks5h://s-1@"+px.socks, fmt.Sprintf("http://web.test:%d/", portOf(t, web.URL))); got != fmt.Sprintf("web-ok web.test:%d 200", portOf(t, web.URL)) {
		t.Errorf("socks5h: %q", got)
	}
	if got := run("--proxy", httpProxy, "http://evil.test/"); !strings.Contains(got, `add "evil.test" to network.allow_hosts`) || !strings.HasSuffix(got, " 403") {
		t.Errorf("refusal: %q", got)
	}
	// curl reports a refused CONNECT as an error; its output names the 403.
	c := exec.Command(curl, "-sS", "--noproxy", "", "--proxy", httpProxy, "https://evil.test/")
	c.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := c.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "403") {
		t.Errorf("refused CONNECT: %v %s", err, out)
	}
	ds := denials(t, px)
	if len(ds) != 2 || ds[0].Session != "s-1" || ds[0].Via != "http" || ds[1].Via != "connect" {
		t.Errorf("denials %+v", ds)
	}
}

// dnsServer answers A queries for every name with addr (and nothing
// else), on a loopback UDP port.
func dnsServer(t *testing.T, addr netip.Addr) netip.AddrPort {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:n]
			if n < 12 {
				continue
			}
			// The question: labels, then QTYPE and QCLASS.
			i := 12
			for i < n && q[i] != 0 {
				i += int(q[i]) + 1
			}
			if i+5 > n {
				continue
			}
			qtype := binary.BigEndian.Uint16(q[i+1:])
			question := q[12 : i+5]
			resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, question...)
			if qtype == 1 {
				resp[7] = 1
				a := addr.As4()
				resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, a[0], a[1], a[2], a[3])
			}
			pc.WriteTo(resp, from)
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

func TestNewResolver(t *testing.T) {
	srv := dnsServer(t, netip.MustParseAddr("198.51.100.7"))
	r := NewResolver(srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := r(ctx, "registry.example.test")
	if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("198.51.100.7") {
		t.Fatalf("resolved %v, %v", addrs, err)
	}
}

// buildRole builds the role as the product is built (CGO_ENABLED=0, so
// capabilities can be dropped from every thread).
func buildRole(t *testing.T) string {
	t.Helper()
	// Built once per test process: each link takes seconds.
	role.once.Do(func() {
		if role.dir, role.err = os.MkdirTemp("", "egressrole"); role.err != nil {
			return
		}
		role.bin = filepath.Join(role.dir, "egressrole")
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		c := exec.Command(goTool, "build", "-o", role.bin, "./testdata/egressrole")
		c.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := c.CombinedOutput(); err != nil {
			role.err = fmt.Errorf("build the role: %v\n%s", err, out)
		}
	})
	if role.err != nil {
		t.Fatal(role.err)
	}
	return role.bin
}

// role is the role's binary, built by the first test that needs it and
// removed by TestMain.
var role struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if role.dir != "" {
		os.RemoveAll(role.dir)
	}
	os.Exit(code)
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestRole runs the role as the Runtime Supervisor does: sealed policy,
// denial log and ask socket inherited, ready line on stdout, no
// capability on any thread, and exit when stdin reaches EOF.
func TestRole(t *testing.T) {
	bin := buildRole(t)
	port, stop := echoServer(t)
	defer stop()
	pol := policy(t, true, false, "listed.test")
	mfd, err := fdpass.SealedMemfd("policy", pol.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	defer mfd.Close()
	logPath := filepath.Join(t.TempDir(), "network-denials.log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	dns := dnsServer(t, netip.MustParseAddr("127.0.0.1"))
	httpAddr, socksAddr := freePort(t), freePort(t)
	c := exec.Command(bin, Args(3, "claude", dns, httpAddr, socksAddr, 4, -1)...)
	c.ExtraFiles = []*os.File{mfd, lf}
	stdin, _ := c.StdinPipe()
	stdout, _ := c.StdoutPipe()
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	defer func() {
		if c.ProcessState == nil {
			c.Process.Kill()
		}
	}()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != ReadyLine {
			t.Fatalf("stdout %q; stderr:\n%s", line, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no ready line; stderr:\n%s", stderr.String())
	}
	held, nnp, err := capability.Held(c.Process.Pid)
	if err != nil || len(held) != 0 || !nnp {
		t.Fatalf("the role holds %v (no_new_privs %v, %v)", held, nnp, err)
	}
	// A listed name, resolved through --dns, is connected; another is
	// refused and logged.
	conn, err := DialSOCKS(context.Background(), socksAddr, "s-1", "listed.test", port)
	if err != nil {
		t.Fatalf("listed name: %v; stderr:\n%s", err, stderr.String())
	}
	fmt.Fprintln(conn, "ping")
	if line, _ := bufio.NewReader(conn).ReadString('\n'); line != "echo ping\n" {
		t.Fatalf("echo %q", line)
	}
	conn.Close()
	resp, body, cc := connect(t, httpAddr, "s-1", "other.test:443")
	if cc != nil || resp.StatusCode != 403 || !strings.Contains(body, `add "other.test" to network.allow_hosts`) {
		t.Fatalf("refusal: %d %q", resp.StatusCode, body)
	}
	ds, err := ReadDenials(logPath)
	if err != nil || len(ds) != 1 || ds[0].Host != "other.test" || ds[0].Session != "s-1" {
		t.Fatalf("denial log %+v %v", ds, err)
	}
	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the role did not exit when stdin closed")
	}
}

// TestRoleRefusesBadInput: a deny-mode policy, an unsealed policy fd and
// an asking policy without --ask-fd each stop the role before it serves.
func TestRoleRefusesBadInput(t *testing.T) {
	bin := buildRole(t)
	dns := netip.MustParseAddrPort("127.0.0.1:53")
	run := func(policy []byte, sealed bool, want string) {
		t.Helper()
		var pf *os.File
		var err error
		if sealed {
			pf, err = fdpass.SealedMemfd("policy", policy)
		} else {
			pf, err = os.CreateTemp(t.TempDir(), "policy")
			pf.Write(policy)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer pf.Close()
		lf, _ := os.CreateTemp(t.TempDir(), "log")
		defer lf.Close()
		c := exec.Command(bin, Args(3, "claude", dns, freePort(t), freePort(t), 4, -1)...)
		c.ExtraFiles = []*os.File{pf, lf}
		out, err := c.CombinedOutput()
		if err == nil || strings.Contains(string(out), ReadyLine) || !strings.Contains(string(out), want) {
			t.Errorf("want a refusal naming %q: %v\n%s", want, err, out)
		}
	}
	p := policy(t, false, false, "a.test")
	run(p.Canonical(), false, "not a sealable memfd")
	deny := p
	deny.Mode, deny.Hosts = "", nil
	run(deny.Canonical(), true, "not in allowlist mode")
	run(policy(t, false, true).Canonical(), true, "--ask-fd")
}
