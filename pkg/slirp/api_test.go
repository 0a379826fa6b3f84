package slirp

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHelper answers one request per connection like slirp4netns's API.
func fakeHelper(t *testing.T, answer func(req map[string]any) string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), APISocketName)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(c)
			var req map[string]any
			json.Unmarshal(b, &req)
			io.WriteString(c, answer(req))
			c.Close()
		}
	}()
	return sock
}

func TestAddHostFwd(t *testing.T) {
	var got map[string]any
	sock := fakeHelper(t, func(req map[string]any) string { got = req; return `{"return": {"id": 7}}` })
	id, err := AddHostFwd(context.Background(), sock, HostFwd{
		HostAddr: netip.MustParseAddr("127.0.0.1"), HostPort: 8080, GuestAddr: netip.MustParseAddr("10.0.2.100"), GuestPort: 80})
	if err != nil || id != 7 {
		t.Fatalf("id %d err %v", id, err)
	}
	args := got["arguments"].(map[string]any)
	if got["execute"] != "add_hostfwd" || args["proto"] != "tcp" || args["host_addr"] != "127.0.0.1" || args["host_port"] != 8080.0 || args["guest_addr"] != "10.0.2.100" || args["guest_port"] != 80.0 {
		t.Fatalf("request %v", got)
	}
}

func TestAPIErrorAndList(t *testing.T) {
	sock := fakeHelper(t, func(req map[string]any) string {
		if req["execute"] == "list_hostfwd" {
			return `{"return": {"entries": [{"id": 1, "proto": "tcp", "host_addr": "127.0.0.1", "host_port": 5173, "guest_addr": "10.0.2.100", "guest_port": 5173}]}}`
		}
		return `{"error": {"desc": "bad request: add_hostfwd: slirp_add_hostfwd failed"}}`
	})
	if _, err := AddHostFwd(context.Background(), sock, HostFwd{HostAddr: netip.MustParseAddr("127.0.0.1"), HostPort: 1, GuestPort: 1, GuestAddr: netip.MustParseAddr("10.0.2.100")}); err == nil || !strings.Contains(err.Error(), "slirp_add_hostfwd failed") {
		t.Fatalf("err %v", err)
	}
	l, err := ListHostFwd(context.Background(), sock)
	if err != nil || len(l) != 1 || l[0].HostPort != 5173 || l[0].GuestAddr != netip.MustParseAddr("10.0.2.100") {
		t.Fatalf("list %v %v", l, err)
	}
}
