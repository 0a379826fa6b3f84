package network

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/slirp"
)

// portsService is a network role whose helper API is a fake answering
// add_hostfwd with increasing ids; it records the requests.
func portsService(t *testing.T) (*Service, *[]map[string]any) {
	t.Helper()
	dir, err := os.MkdirTemp("", "hcports")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := New(Config{Log: slog.New(slog.DiscardHandler), RuntimeDir: dir})
	c.addr, _ = slirp.NetworkFor(slirp.DefaultCIDR)
	l, err := net.Listen("unix", filepath.Join(dir, slirp.APISocketName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var reqs []map[string]any
	go func() {
		for id := 1; ; id++ {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(conn)
			var r map[string]any
			json.Unmarshal(b, &r)
			reqs = append(reqs, r)
			json.NewEncoder(conn).Encode(map[string]any{"return": map[string]any{"id": id}})
			conn.Close()
		}
	}()
	return c, &reqs
}

func TestForwardPortsAndRefusals(t *testing.T) {
	c, reqs := portsService(t)
	free, _ := net.Listen("tcp4", "127.0.0.1:0")
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	p := config.Port{HostAddr: config.LoopbackAddr, HostPort: uint16(port), GuestPort: 80}
	if err := c.forwardPort(p, "profile"); err != nil {
		t.Fatal(err)
	}
	args := (*reqs)[0]["arguments"].(map[string]any)
	if args["guest_addr"] != "10.0.2.100" || args["guest_port"] != 80.0 || args["host_addr"] != "127.0.0.1" {
		t.Fatalf("request %v", *reqs)
	}
	// The same forward again is kept; the same host port to another
	// sandbox port is refused.
	if err := c.forwardPort(p, "again"); err != nil || len(*reqs) != 1 {
		t.Fatalf("repeat: %v, %d requests", err, len(*reqs))
	}
	q := p
	q.GuestPort = 81
	if err := c.forwardPort(q, "session"); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "already forwarded to sandbox port 80") {
		t.Fatalf("conflict: %v", err)
	}
	// A host port in use is named as such, before the helper is asked.
	busy, _ := net.Listen("tcp4", "127.0.0.1:0")
	defer busy.Close()
	b := config.Port{HostAddr: config.LoopbackAddr, HostPort: uint16(busy.Addr().(*net.TCPAddr).Port), GuestPort: 80}
	if err := c.forwardPort(b, "profile"); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "already in use by another program") {
		t.Fatalf("busy: %v", err)
	}
	// -P: loopback only, whatever the CLI sent.
	if err := c.ForwardSessionPorts([]string{"0.0.0.0:9999:80"}, "s1"); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("non-loopback -P: %v", err)
	}
	if len(*reqs) != 1 {
		t.Fatalf("refused forwards reached the helper: %v", *reqs)
	}
	st := c.Status().ForwardedPorts
	if len(st) != 1 || st[0].GetHost() != netip.AddrPortFrom(config.LoopbackAddr, uint16(port)).String() || st[0].GetFrom() != "profile" {
		t.Fatalf("status %v", st)
	}
}
