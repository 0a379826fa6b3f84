package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// httpGet fetches url, retrying until deadline.
func httpGet(url string, deadline time.Time) (string, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	var last error
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return string(b), nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	return "", last
}

// listeners returns the local addresses (hex, as /proc/net/tcp shows
// them) of host sockets listening on port.
func listeners(t *testing.T, port int) []string {
	t.Helper()
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "0A" { // LISTEN
				continue
			}
			if strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", port)) {
				out = append(out, fs[1])
			}
		}
	}
	return out
}

// TestSpec36ForwardedPorts (spec §3.6, slirp4netns host forwarding): a
// profile port and a `-P` port added on a join both serve a page from
// `python3 -m http.server` inside the gVisor sandbox to a host HTTP client
// on 127.0.0.1; nothing listens on a non-loopback address; `lazaret status`
// lists the forwards; a host port in use is a clear error, at start and on
// a join; -P refuses a non-loopback address.
func TestSpec36ForwardedPorts(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	page := "forwarded-" + randHex(8) + "\n"
	if err := os.WriteFile(filepath.Join(ws, "page.txt"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(ws, "page.txt"), e.uid, e.gid)
	p1, p2 := freePort(t), freePort(t)
	busy, err := net.Listen("tcp4", "127.0.0.1:0") // held: "in use"
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p3 := busy.Addr().(*net.TCPAddr).Port
	cfg := userConfig(t, e, fmt.Sprintf(`[profiles.fwd]
image = "debian"
ports = ["127.0.0.1:%d:8000"]

[profiles.busy]
image = "busybox"
ports = ["%d"]
`, p1, p3))

	// A profile port in use fails the start with the reason.
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "busy", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("host 127.0.0.1:%d is already in use", p3)) {
		t.Fatalf("busy profile port: code %d stderr %q", r.code, r.stderr)
	}
	noLeftovers(t)
	// -P never listens beyond loopback.
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "fwd", "-P", fmt.Sprintf("0.0.0.0:%d:8000", p2), "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "not a loopback address") {
		t.Fatalf("-P 0.0.0.0: code %d stderr %q", r.code, r.stderr)
	}

	server := e.cmd(ws, nil, "run", "--config", cfg, "-p", "fwd", "--", "python3", "-m", "http.server", "8000", "--directory", "/workspace")
	var serverErr bytes.Buffer
	server.Stdout, server.Stderr = io.Discard, &serverErr
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	serverDone := make(chan struct{})
	go func() { server.Wait(); close(serverDone) }()
	defer func() {
		server.Process.Signal(syscall.SIGTERM) // the CLI this test started, by its pid
		select {
		case <-serverDone:
		case <-time.After(30 * time.Second):
			server.Process.Kill()
			<-serverDone
		}
	}()
	got, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/page.txt", p1), time.Now().Add(2*time.Minute))
	if err != nil || got != page {
		t.Fatalf("GET through the profile port: %q %v; server stderr: %s", got, err, serverErr.String())
	}
	// A join adds a -P port to the running helper.
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "fwd", "-P", fmt.Sprintf("%d:8000", p2), "--", "true")
	if r.code != 0 {
		t.Fatalf("join with -P: code %d stderr %s", r.code, r.stderr)
	}
	got, err = httpGet(fmt.Sprintf("http://127.0.0.1:%d/page.txt", p2), time.Now().Add(30*time.Second))
	if err != nil || got != page {
		t.Fatalf("GET through the -P port: %q %v", got, err)
	}
	// A join asking for a host port in use is refused with the reason.
	r = lz(t, ws, nil, "run", "--config", cfg, "-p", "fwd", "-P", fmt.Sprint(p3), "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("host 127.0.0.1:%d is already in use", p3)) {
		t.Fatalf("join with a busy -P: code %d stderr %q", r.code, r.stderr)
	}
	// Loopback only: every listener of both ports is 127.0.0.1.
	for _, p := range []int{p1, p2} {
		ls := listeners(t, p)
		if len(ls) == 0 {
			t.Fatalf("nothing listens on port %d", p)
		}
		for _, l := range ls {
			if l != fmt.Sprintf("0100007F:%04X", p) {
				t.Fatalf("port %d listens on %s, not only 127.0.0.1", p, l)
			}
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			ip, ok := a.(*net.IPNet)
			if !ok || ip.IP.IsLoopback() || ip.IP.To4() == nil {
				continue
			}
			if c, err := net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", ip.IP, p1), time.Second); err == nil {
				c.Close()
				t.Fatalf("the forwarded port answers on %s", ip.IP)
			}
		}
	}
	st := lz(t, ws, nil, "status", "--json")
	var docs []map[string]any
	if err := json.Unmarshal([]byte(st.stdout), &docs); err != nil {
		t.Fatalf("status --json: %v\n%s", err, st.stdout)
	}
	text := lz(t, ws, nil, "status").stdout
	found := 0
	for _, d := range docs {
		n, _ := d["network"].(map[string]any)
		ps, _ := n["forwarded_ports"].([]any)
		for _, p := range ps {
			m := p.(map[string]any)
			if m["host"] == fmt.Sprintf("127.0.0.1:%d", p1) && m["from"] == "profile" || m["host"] == fmt.Sprintf("127.0.0.1:%d", p2) {
				found++
			}
		}
	}
	if found != 2 || !strings.Contains(text, fmt.Sprintf("127.0.0.1:%d->8000", p1)) {
		t.Fatalf("status does not list both forwards:\n%s\n%s", st.stdout, text)
	}
	server.Process.Signal(syscall.SIGTERM)
	select {
	case <-serverDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the server session did not end on SIGTERM")
	}
	noLeftovers(t)
	if _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/page.txt", p1), time.Now().Add(time.Second)); err == nil {
		t.Fatal("the forward outlived its Domain")
	}
}
