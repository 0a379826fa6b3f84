package integration

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"
)

// fakeCoordinator is another user's (the harness is root) listener posing
// as a Domain's Host Coordinator: it records every connection and byte.
type fakeCoordinator struct {
	l     *net.UnixListener
	mu    sync.Mutex
	conns int
	bytes int
	done  sync.WaitGroup
}

func listenFake(t *testing.T, sock string) *fakeCoordinator {
	t.Helper()
	os.MkdirAll(filepath.Dir(sock), 0o755)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o777)
	f := &fakeCoordinator{l: l}
	f.done.Add(1)
	go func() {
		defer f.done.Done()
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns++
			f.mu.Unlock()
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, _ := io.Copy(io.Discard, c)
			c.Close()
			f.mu.Lock()
			f.bytes += int(n)
			f.mu.Unlock()
		}
	}()
	return f
}

func (f *fakeCoordinator) stop() (conns, bytes int) {
	f.l.Close()
	f.done.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.bytes
}

// TestSR10RuntimeDirectoryTrust (SR-10, the CLI's half): a CLI dials the
// control socket and reads the publication only in a runtime directory it
// verified — a real directory of the developer's, mode 0700, opened beneath
// its verified parent — and only a coordinator running as the developer
// (SO_PEERCRED). Each attack plants a fake coordinator another user serves
// at the Domain's control socket path; the CLI must exit 125 naming the
// path and the fix, and the fake must receive nothing: no byte of the
// profile, argv, stdin or keystrokes.
func TestSR10RuntimeDirectoryTrust(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	id := domain.DeriveID("tiny", ws)
	cases := []struct {
		name string
		// plant lays out the runtime root rt/lazaret and returns the socket
		// path the fake serves.
		plant func(t *testing.T, rt string) string
		want  string
	}{
		{"runtime root created by another user", func(t *testing.T, rt string) string {
			os.Mkdir(filepath.Join(rt, "lazaret"), 0o755) // root's
			return filepath.Join(rt, "lazaret", string(id), "control.sock")
		}, "is owned by uid 0, not by you"},
		{"runtime root with mode 0755", func(t *testing.T, rt string) string {
			d := filepath.Join(rt, "lazaret")
			os.Mkdir(d, 0o755)
			os.Chown(d, e.uid, e.gid)
			return filepath.Join(d, string(id), "control.sock")
		}, "chmod 700 " + "<rt>/lazaret"},
		{"symlinked runtime root", func(t *testing.T, rt string) string {
			elsewhere := filepath.Join(filepath.Dir(rt), "elsewhere-"+randHex(3))
			os.Mkdir(elsewhere, 0o700)
			os.Chown(elsewhere, e.uid, e.gid)
			os.Symlink(elsewhere, filepath.Join(rt, "lazaret"))
			return filepath.Join(elsewhere, string(id), "control.sock")
		}, "<rt>/lazaret is not a real directory"},
		{"Domain runtime directory created by another user", func(t *testing.T, rt string) string {
			d := filepath.Join(rt, "lazaret")
			os.Mkdir(d, 0o700)
			os.Chown(d, e.uid, e.gid)
			os.Mkdir(filepath.Join(d, string(id)), 0o755) // root's
			return filepath.Join(d, string(id), "control.sock")
		}, "is owned by uid 0, not by you"},
		{"coordinator of another user in a private directory", func(t *testing.T, rt string) string {
			d := filepath.Join(rt, "lazaret")
			for _, p := range []string{d, filepath.Join(d, string(id))} {
				os.Mkdir(p, 0o700)
				os.Chown(p, e.uid, e.gid)
			}
			return filepath.Join(d, string(id), "control.sock")
		}, "is served by uid 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := e.userDir("rt-" + randHex(4))
			os.Chmod(rt, 0o700)
			sock := c.plant(t, rt)
			fake := listenFake(t, sock)
			r := lzEnv(t, ws, []string{"XDG_RUNTIME_DIR=" + rt}, strings.NewReader("secret keystrokes\n"), "run", "-p", "tiny", "--", "echo", "secret-argv")
			conns, bytes := fake.stop()
			want := strings.ReplaceAll(c.want, "<rt>", rt)
			if r.code != 125 || !strings.Contains(r.stderr, want) {
				t.Errorf("lazaret run: exit %d, want 125 naming %q\nstderr: %s", r.code, want, r.stderr)
			}
			if strings.Contains(r.stdout, "secret-argv") {
				t.Errorf("the command ran: %s", r.stdout)
			}
			if bytes != 0 {
				t.Errorf("the fake coordinator received %d bytes over %d connections", bytes, conns)
			}
			if c.name != "coordinator of another user in a private directory" && conns != 0 {
				t.Errorf("the CLI connected %d times to a socket in an unverified directory", conns)
			}
			os.RemoveAll(rt)
		})
	}
	noLeftovers(t)
}
