package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netpolicy"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// policy derives an allowlist policy with the given host rules; allowLoop
// adds network.allow = ["127.0.0.1/32"], without which every test
// destination (all on loopback) is refused.
func policy(t *testing.T, allowLoop, ask bool, hosts ...string) netpolicy.Policy {
	t.Helper()
	in := netpolicy.Input{Mode: netpolicy.ModeAllowlist, Ask: ask}
	if allowLoop {
		in.Allow = []netpolicy.Rule{{Prefix: netip.MustParsePrefix("127.0.0.1/32"), Source: "test"}}
	}
	for _, h := range hosts {
		r, err := netpolicy.ParseHostRule(h)
		if err != nil {
			t.Fatal(err)
		}
		in.Hosts = append(in.Hosts, netpolicy.HostRuleSource{Rule: r, Source: "test"})
	}
	p, err := netpolicy.Derive(in)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type proxy struct {
	http, socks string // addresses
	denials     string // path of the denial log
	stop        func()
}

// fakeResolve maps every name ending in ".test", and example.com (the name
// httptest's certificate carries), to 127.0.0.1, except those starting
// with "nx.".
func fakeResolve(_ context.Context, host string) ([]netip.Addr, error) {
	if strings.HasPrefix(host, "nx.") || !(strings.HasSuffix(host, ".test") || host == "example.com") {
		return nil, fmt.Errorf("no such host %s", host)
	}
	return []netip.Addr{loopback}, nil
}

func startProxy(t *testing.T, p netpolicy.Policy, tweak func(*Config)) *proxy {
	t.Helper()
	hl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "network-denials.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := NewDenialLog(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Policy: p, Profile: "claude", HTTP: hl, SOCKS: sl, Resolve: fakeResolve, Denials: dl}
	if tweak != nil {
		tweak(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg) }()
	px := &proxy{http: hl.Addr().String(), socks: sl.Addr().String(), denials: path}
	var once sync.Once
	px.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Serve did not return after its context ended")
			}
			f.Close()
		})
	}
	t.Cleanup(px.stop)
	return px
}

func portOf(t *testing.T, rawURL string) uint16 {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(u.Port())
	return uint16(p)
}

// connect sends CONNECT target through the HTTP proxy and returns the
// response and the connection (open only after a 200).
func connect(t *testing.T, proxyAddr, session, target string) (*http.Response, string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	auth := ""
	if session != "" {
		auth = "Proxy-Authorization: Basic " + basic(session) + "\r\n"
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		return resp, string(b), nil
	}
	return resp, "", c
}

func basic(user string) string { return base64.StdEncoding.EncodeToString([]byte(user + ":")) }

func denials(t *testing.T, px *proxy) []Denial {
	t.Helper()
	ds, err := ReadDenials(px.denials)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func TestConnectSplicesTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls ok %s %s", r.Host, r.URL.Path)
	}))
	defer srv.Close()
	px := startProxy(t, policy(t, true, false, "example.com"), nil)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	pu, _ := url.Parse("http://s-1@" + px.http)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	u := fmt.Sprintf("https://example.com:%d/p", portOf(t, srv.URL))
	for i := 0; i < 2; i++ {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("tls ok example.com:%d /p", portOf(t, srv.URL)); string(b) != want {
			t.Fatalf("through CONNECT: %q, want %q", b, want)
		}
	}
	if ds := denials(t, px); len(ds) != 0 {
		t.Fatalf("denials for an allowed host: %+v", ds)
	}
}

func TestPlainHTTPForwarding(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %s auth=%q pc=%q body=%q", r.Method, r.Host, r.RequestURI, r.Header.Get("Proxy-Authorization"), r.Header.Get("Proxy-Connection"), body))
		mu.Unlock()
		if r.URL.Path == "/chunked" {
			w.Write([]byte("part1,"))
			w.(http.Flusher).Flush()
			w.Write([]byte("part2"))
			return
		}
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	defer srv.Close()
	port := portOf(t, srv.URL)
	px := startProxy(t, policy(t, true, false, "web.test"), nil)
	pu, _ := url.Parse("http://s-7@" + px.http)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer client.CloseIdleConnections()
	base := fmt.Sprintf("http://web.test:%d", port)
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/a?x=1", "", "hello /a"},
		{"POST", "/b", "payload", "hello /b"},
		{"GET", "/chunked", "", "part1,part2"},
		{"GET", "/c", "", "hello /c"},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		req.Header.Set("Proxy-Connection", "keep-alive")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != c.want {
			t.Fatalf("%s %s: %d %q, want %q", c.method, c.path, resp.StatusCode, b, c.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		fmt.Sprintf(`GET web.test:%d /a?x=1 auth="" pc="" body=""`, port),
		fmt.Sprintf(`POST web.test:%d /b auth="" pc="" body="payload"`, port),
		fmt.Sprintf(`GET web.test:%d /chunked auth="" pc="" body=""`, port),
		fmt.Sprintf(`GET web.test:%d /c auth="" pc="" body=""`, port),
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the server saw:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

func TestRefusals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") }))
	defer srv.Close()
	port := portOf(t, srv.URL)
	px := startProxy(t, policy(t, true, false, "*.wild.test", fmt.Sprintf("ported.test:%d", port), "nx.gone.test"), nil)
	ok := func(target string) {
		t.Helper()
		resp, body, c := connect(t, px.http, "s-2", target)
		if c == nil {
			t.Fatalf("CONNECT %s: %d %s", target, resp.StatusCode, body)
		}
		c.Close()
	}
	ok(fmt.Sprintf("a.wild.test:%d", port))
	ok(fmt.Sprintf("A.B.Wild.Test.:%d", port))
	ok(fmt.Sprintf("ported.test:%d", port))
	ok(fmt.Sprintf("127.0.0.1:%d", port)) // raw address inside network.allow
	cases := []struct {
		target string
		code   int
		msg    string
	}{
		{"evil.test:443", 403, `lazaret: egress to evil.test:443 denied by profile claude (network.mode = "allowlist"); to allow it add "evil.test" to network.allow_hosts in the profile`},
		{fmt.Sprintf("wild.test:%d", port), 403, fmt.Sprintf(`lazaret: egress to wild.test:%d denied by profile claude (network.mode = "allowlist"); to allow it add "wild.test" to network.allow_hosts in the profile`, port)},
		{"ported.test:443", 403, `lazaret: egress to ported.test:443 denied by profile claude (network.mode = "allowlist"); to allow it add "ported.test:443" to network.allow_hosts in the profile`},
		{"10.1.2.3:443", 403, `lazaret: egress to 10.1.2.3:443 denied by profile claude (network.mode = "allowlist"): a raw IP address is allowed only inside network.allow; to allow it add "10.1.2.3/32" to network.allow in the profile, or use its host name`},
		{"93.184.216.34:443", 403, `add "93.184.216.34/32" to network.allow`},
		{"nx.gone.test:443", 502, "cannot resolve nx.gone.test"},
		{"bad_name.test:443", 400, "not a host name"},
		{"nohost", 400, "not HOST:PORT"},
	}
	for _, c := range cases {
		resp, body, conn := connect(t, px.http, "s-2", c.target)
		if conn != nil {
			conn.Close()
			t.Errorf("CONNECT %s allowed", c.target)
			continue
		}
		if resp.StatusCode != c.code || !strings.Contains(body, c.msg) {
			t.Errorf("CONNECT %s: %d %q; want %d with %q", c.target, resp.StatusCode, body, c.code, c.msg)
		}
		if (resp.Header.Get("X-Lazaret-Denied") == "1") != (c.code == 403) {
			t.Errorf("CONNECT %s: X-Lazaret-Denied %q", c.target, resp.Header.Get("X-Lazaret-Denied"))
		}
	}
	// Plain HTTP to a name outside the list.
	pu, _ := url.Parse("http://s-3@" + px.http)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://evil.test/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Lazaret-Denied") != "1" || !strings.Contains(string(b), `egress to evil.test:80 denied by profile claude`) {
		t.Fatalf("plain HTTP refusal: %d %q", resp.StatusCode, b)
	}
	ds := denials(t, px)
	var got []string
	for _, d := range ds {
		if d.V != 1 || d.Time.IsZero() || d.Reason == "" {
			t.Errorf("incomplete denial %+v", d)
		}
		got = append(got, fmt.Sprintf("%s %s %d %s %s %s", d.Session, d.Host, d.Port, d.Addr, d.Via, d.Decision))
	}
	want := []string{
		"s-2 evil.test 443  connect denied",
		fmt.Sprintf("s-2 wild.test %d  connect denied", port),
		"s-2 ported.test 443  connect denied",
		"s-2 10.1.2.3 443 10.1.2.3 connect denied",
		"s-2 93.184.216.34 443 93.184.216.34 connect denied",
		"s-3 evil.test 80  http denied",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("denial log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLoopbackRefusedWithoutAllow: an allowed name that resolves to
// 127.0.0.1 is refused when network.allow does not cover loopback.
func TestLoopbackRefusedWithoutAllow(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the server was reached") }))
	defer srv.Close()
	port := portOf(t, srv.URL)
	px := startProxy(t, policy(t, false, false, "web.test"), nil)
	target := fmt.Sprintf("web.test:%d", port)
	resp, body, c := connect(t, px.http, "s-4", target)
	if c != nil {
		c.Close()
		t.Fatal("a name resolving to loopback was connected")
	}
	want := fmt.Sprintf(`lazaret: egress to %s denied by profile claude (network.mode = "allowlist"): web.test resolves to 127.0.0.1, a loopback address; to allow it add "127.0.0.1/32" to network.allow in the profile`, target)
	if resp.StatusCode != 403 || strings.TrimSpace(body) != want {
		t.Fatalf("%d %q\nwant %q", resp.StatusCode, body, want)
	}
	resp, body, c = connect(t, px.http, "s-4", fmt.Sprintf("127.0.0.1:%d", port))
	if c != nil || resp.StatusCode != 403 || !strings.Contains(body, "network.allow") {
		t.Fatalf("raw loopback: %d %q", resp.StatusCode, body)
	}
	ds := denials(t, px)
	if len(ds) != 2 || ds[0].Addr != "127.0.0.1" || ds[0].Host != "web.test" || !strings.Contains(ds[0].Reason, "loopback") {
		t.Fatalf("denials %+v", ds)
	}
	// SOCKS too.
	if _, err := DialSOCKS(context.Background(), px.socks, "s-4", "web.test", port); err == nil {
		t.Fatal("SOCKS connected to a name resolving to loopback")
	}
}

// echoServer accepts connections and echoes each line prefixed by "echo ".
func echoServer(t *testing.T) (uint16, func()) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "echo %s\n", sc.Text())
				}
			}()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port), func() { ln.Close() }
}

func TestSOCKS5(t *testing.T) {
	port, stop := echoServer(t)
	defer stop()
	px := startProxy(t, policy(t, true, false, fmt.Sprintf("ssh.test:%d", port), "nx.none.test"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, user := range []string{"s-5", ""} {
		c, err := DialSOCKS(ctx, px.socks, user, "ssh.test", port)
		if err != nil {
			t.Fatalf("user %q: %v", user, err)
		}
		fmt.Fprintf(c, "hi %s\n", user)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || line != fmt.Sprintf("echo hi %s\n", user) {
			t.Fatalf("through SOCKS: %q %v", line, err)
		}
	}
	// A raw IPv4 address inside network.allow.
	c, err := DialSOCKS(ctx, px.socks, "s-5", "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Refusals: outside the list (0x02, a refusal), unresolvable (0x04).
	_, err = DialSOCKS(ctx, px.socks, "s-5", "other.test", port)
	var se *SOCKSError
	if !errors.As(err, &se) || se.Code != RepNotAllowed || !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("outside the list: %v", err)
	}
	_, err = DialSOCKS(ctx, px.socks, "", "ssh.test", port+1)
	if !errors.As(err, &se) || se.Code != RepNotAllowed {
		t.Fatalf("other port: %v", err)
	}
	_, err = DialSOCKS(ctx, px.socks, "s-5", "nx.none.test", 22)
	if !errors.As(err, &se) || se.Code != RepHostUnreachable || errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("unresolvable: %v", err)
	}
	ds := denials(t, px)
	if len(ds) != 2 || ds[0].Session != "s-5" || ds[0].Via != "socks" || ds[0].Host != "other.test" || ds[1].Session != "" || ds[1].Port != port+1 {
		t.Fatalf("denials %+v", ds)
	}
	// Raw protocol: IPv6 address type (0x08), BIND (0x07), no acceptable
	// method (0xff).
	raw := func(greet, req []byte, wantLen int) []byte {
		t.Helper()
		c, err := net.Dial("tcp", px.socks)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(greet)
		c.Write(req)
		b := make([]byte, wantLen)
		n, _ := io.ReadFull(c, b)
		return b[:n]
	}
	ipv6 := append([]byte{5, 1, 0, 4}, append(netip.MustParseAddr("::1").AsSlice(), 0, 22)...)
	if b := raw([]byte{5, 1, 0}, ipv6, 12); len(b) != 12 || b[1] != 0 || b[3] != RepAddressNotSupported {
		t.Fatalf("IPv6 address type: % x", b)
	}
	bind := []byte{5, 2, 0, 3, 8, 's', 's', 'h', '.', 't', 'e', 's', 't', byte(port >> 8), byte(port)}
	if b := raw([]byte{5, 1, 0}, bind, 12); len(b) != 12 || b[3] != RepCommandNotSupported {
		t.Fatalf("BIND: % x", b)
	}
	if b := raw([]byte{5, 1, 0x80}, nil, 2); len(b) != 2 || b[1] != 0xff {
		t.Fatalf("no acceptable method: % x", b)
	}
	// With both methods offered the proxy picks username/password.
	if b := raw([]byte{5, 2, 0, 2}, []byte{1, 3, 's', '-', '9', 0}, 4); len(b) != 4 || b[1] != 2 || b[2] != 1 || b[3] != 0 {
		t.Fatalf("method choice and RFC 1929 status: % x", b)
	}
}

// askProxy starts a proxy whose policy asks, with ask as the Ask function.
func askProxy(t *testing.T, ask func(context.Context, AskRequest) (Decision, error), timeout time.Duration) *proxy {
	return startProxy(t, policy(t, true, true, "listed.test"), func(c *Config) {
		c.Ask = ask
		c.AskTimeout = timeout
	})
}

func TestAskDecisions(t *testing.T) {
	port, stop := echoServer(t)
	defer stop()
	var calls atomic.Int32
	var mu sync.Mutex
	answer := map[string]Decision{"once.test": AllowOnce, "domain.test": AllowDomain, "deny.test": Deny}
	var reqs []AskRequest
	px := askProxy(t, func(_ context.Context, r AskRequest) (Decision, error) {
		calls.Add(1)
		mu.Lock()
		reqs = append(reqs, r)
		mu.Unlock()
		return answer[r.Host], nil
	}, 0)
	target := func(h string) string { return fmt.Sprintf("%s:%d", h, port) }
	expect := func(h, session string, allowed bool, calledTimes int32) {
		t.Helper()
		resp, body, c := connect(t, px.http, session, target(h))
		if c != nil {
			c.Close()
		}
		if (c != nil) != allowed {
			t.Fatalf("%s as %q: %d %q, want allowed=%v", h, session, resp.StatusCode, body, allowed)
		}
		if n := calls.Load(); n != calledTimes {
			t.Fatalf("%s: %d asks so far, want %d", h, n, calledTimes)
		}
	}
	expect("listed.test", "s-1", true, 0) // in the list: never asked
	expect("once.test", "s-1", true, 1)
	expect("once.test", "s-1", true, 2) // once: asked again
	expect("domain.test", "s-1", true, 3)
	expect("domain.test", "s-1", true, 3) // remembered for the proxy's lifetime
	expect("domain.test", "", true, 3)    // remembered, even without a label
	expect("deny.test", "s-1", false, 4)
	expect("other.test", "", false, 4) // no label: not asked
	// SOCKS asks too, with its via.
	if c, err := DialSOCKS(context.Background(), px.socks, "s-8", "once.test", port); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	mu.Lock()
	last := reqs[len(reqs)-1]
	mu.Unlock()
	if last != (AskRequest{Session: "s-8", Host: "once.test", Port: port, Via: "socks"}) {
		t.Fatalf("ask request %+v", last)
	}
	ds := denials(t, px)
	if len(ds) != 2 || ds[0].Host != "deny.test" || ds[0].Decision != DecisionAskedDenied || ds[1].Host != "other.test" || ds[1].Decision != DecisionNonInteractive {
		t.Fatalf("denials %+v", ds)
	}
	_, body, _ := connect(t, px.http, "s-1", target("deny.test"))
	if !strings.Contains(body, "denied at the terminal (profile claude, network.ask = true); to allow it always add \"deny.test\" to network.allow_hosts") {
		t.Fatalf("asked-denied message %q", body)
	}
	_, body, _ = connect(t, px.http, "", target("other.test"))
	if !strings.Contains(body, "names no interactive session") {
		t.Fatalf("non-interactive message %q", body)
	}
}

func TestAskTimeoutAndSingleFlight(t *testing.T) {
	port, stop := echoServer(t)
	defer stop()
	release := make(chan Decision)
	var calls atomic.Int32
	var ctxEnded atomic.Bool
	px := askProxy(t, func(ctx context.Context, r AskRequest) (Decision, error) {
		calls.Add(1)
		if r.Host == "slow.test" {
			<-ctx.Done()
			ctxEnded.Store(true)
			return Deny, ctx.Err()
		}
		return <-release, nil
	}, 300*time.Millisecond)
	start := time.Now()
	resp, body, c := connect(t, px.http, "s-1", fmt.Sprintf("slow.test:%d", port))
	if c != nil || resp.StatusCode != 403 || !strings.Contains(body, "denied at the terminal") {
		t.Fatalf("unanswered ask: %d %q", resp.StatusCode, body)
	}
	if el := time.Since(start); el < 250*time.Millisecond || el > 5*time.Second {
		t.Fatalf("the unanswered ask ended after %v, want the 300ms timeout", el)
	}
	// The proxy answers the client when the timeout fires; the ask's own
	// goroutine sees its context end at the same moment but may run a
	// little later (a full make test loses that race now and then).
	for end := time.Now().Add(2 * time.Second); !ctxEnded.Load() && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	if !ctxEnded.Load() {
		t.Fatal("the ask's context did not end at the timeout")
	}
	// Three requests for one host:port wait for one ask.
	calls.Store(0)
	var wg sync.WaitGroup
	results := make(chan bool, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, c := connect(t, px.http, "s-1", fmt.Sprintf("shared.test:%d", port))
			if c != nil {
				c.Close()
			}
			results <- c != nil
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the others arrive and wait
	release <- AllowOnce
	wg.Wait()
	close(results)
	for ok := range results {
		if !ok {
			t.Fatal("a request waiting on the shared ask was refused")
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d asks for one host:port, want 1", n)
	}
}

// TestAskWithoutAskFunction: a policy that asks but a proxy with no way to
// ask denies as non-interactive.
func TestAskWithoutAskFunction(t *testing.T) {
	px := startProxy(t, policy(t, true, true), nil)
	resp, _, c := connect(t, px.http, "s-1", "x.test:443")
	if c != nil || resp.StatusCode != 403 {
		t.Fatal("allowed without asking")
	}
	if ds := denials(t, px); len(ds) != 1 || ds[0].Decision != DecisionNonInteractive {
		t.Fatalf("%+v", ds)
	}
}

func TestServeRefusesDenyMode(t *testing.T) {
	p, _ := netpolicy.Derive(netpolicy.Input{})
	ln, _ := net.Listen("tcp4", "127.0.0.1:0")
	defer ln.Close()
	if err := Serve(context.Background(), Config{Policy: p, HTTP: ln, Resolve: fakeResolve}); err == nil || !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("deny-mode policy served: %v", err)
	}
}

// TestHeadersBounded: the proxy runs on the host and reads headers from
// the sandbox and from upstream servers; neither may make it buffer more
// than maxHeaderBytes. A request header that never ends is answered 400
// naming the bound; a response header that never ends is answered 502.
func TestHeadersBounded(t *testing.T) {
	// Upstream: a raw server whose response header never ends.
	ul, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	go func() {
		for {
			c, err := ul.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				http.ReadRequest(bufio.NewReader(c))
				io.WriteString(c, "HTTP/1.1 200 OK\r\n")
				line := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
				for i := 0; i < 4096; i++ {
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	port := ul.Addr().(*net.TCPAddr).Port
	px := startProxy(t, policy(t, true, false, "web.test"), nil)

	send := func(head string, pad int) string {
		t.Helper()
		c, err := net.Dial("tcp", px.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			io.WriteString(c, head)
			line := "X-Pad: " + strings.Repeat("b", 1000) + "\r\n"
			for i := 0; i < pad; i++ {
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
			io.WriteString(c, "\r\n")
		}()
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	// 4 MiB of request header lines.
	if got := send("GET http://web.test:1/ HTTP/1.1\r\nHost: web.test:1\r\n", 4096); !strings.HasPrefix(got, "400 ") || !strings.Contains(got, "larger than 1024 KiB") {
		t.Errorf("an endless request header: %s", got)
	}
	// A response header of 4 MiB from upstream.
	if got := send(fmt.Sprintf("GET http://web.test:%d/ HTTP/1.1\r\nHost: web.test:%d\r\n", port, port), 0); !strings.HasPrefix(got, "502 ") || !strings.Contains(got, "larger than 1024 KiB") {
		t.Errorf("an endless response header: %s", got)
	}
}
