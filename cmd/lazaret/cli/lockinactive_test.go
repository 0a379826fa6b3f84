package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/shellquote"
)

// TestLockInactiveWaitsForEndingTeardown: a coordinator whose teardown
// ends between the CLI's connection and its status request (here: a
// listener that goes during the status request, its lock released a
// little later) is not reported active; the lock is waited for and taken
// once released. TestRmRefusals covers the other side: a socket that still
// answers without a status (a starting coordinator) is active.
func TestLockInactiveWaitsForEndingTeardown(t *testing.T) {
	paths, ln, holder := heldDomain(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The teardown ends during the status request: the socket goes at
	// once, the lock 300 ms later (the coordinator's exit).
	asked := false
	liveStatus = func(domain.Paths, string) (*lv1.DomainStatus, error) {
		if !asked {
			asked = true
			ln.Close() // removes the socket
			go func() {
				time.Sleep(300 * time.Millisecond)
				holder.Close()
			}()
		}
		return nil, client.ErrNotPublished
	}
	defer func() { liveStatus = client.LiveStatus }()
	lock, err := os.OpenFile(paths.LockFile(), os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	rd := resolvedDomain{paths: paths, prof: profile{Name: "tiny"}}
	if err := lockInactive(lock, rd, "reset"); err != nil {
		t.Fatalf("a Domain whose teardown was ending was refused: %v", err)
	}
}

// TestActiveRefusalNamesWhatKeepsItUp: the refusal of a maintenance
// operation on an active Domain names its sessions, or, for a Domain that
// lingers with none, the time left and the stop that ends it.
func TestActiveRefusalNamesWhatKeepsItUp(t *testing.T) {
	id := domain.DeriveID("tiny", "/ws")
	running := &lv1.DomainStatus{State: proto.String("running"), Generation: proto.Uint64(4),
		Sessions: []*lv1.SessionStatus{{SessionId: proto.String("s1")}}}
	msg := activeRefusalFor(id, "lazaret stop -p tiny", running, nil, "remove it").Error()
	for _, want := range []string{"is active (state running, generation 4, running session(s) s1)", "end its sessions", "`lazaret stop -p tiny` (which ends them), then remove it", "--yes does not bypass this"} {
		if !strings.Contains(msg, want) {
			t.Errorf("with a session: %q lacks %q", msg, want)
		}
	}
	lingering := &lv1.DomainStatus{State: proto.String("running"), Generation: proto.Uint64(4), LingerMs: proto.Int64(600000), LingerLeftMs: proto.Int64(551600)}
	msg = activeRefusalFor(id, "lazaret stop -p tiny", lingering, nil, "remove it").Error()
	for _, want := range []string{"is active (state running, generation 4)", "it lingers with no session for 9m12s more", "`lazaret stop -p tiny` ends it now, then remove it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("lingering: %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "end its sessions") {
		t.Errorf("lingering: %q asks to end sessions it has not", msg)
	}
	msg = activeRefusalFor(id, "lazaret stop -p tiny", nil, os.ErrDeadlineExceeded, "remove it").Error()
	if !strings.Contains(msg, "is active (its coordinator answers)") || !strings.Contains(msg, "`lazaret stop -p tiny`") {
		t.Errorf("no status: %q", msg)
	}
}

// TestStopCommandFor: the stop a refusal suggests works where the
// developer is: -C the workspace only from outside it.
func TestStopCommandFor(t *testing.T) {
	ws := t.TempDir()
	sub := filepath.Join(ws, "src")
	os.MkdirAll(sub, 0o755)
	rd := resolvedDomain{prof: profile{Name: "tiny"}, workspace: ws}
	for dir, want := range map[string]string{
		ws:          "lazaret stop -p tiny",
		sub:         "lazaret stop -p tiny",
		t.TempDir(): "lazaret stop -p tiny -C " + shellquote.Word(ws),
	} {
		t.Chdir(dir)
		if got := stopCommandFor(rd); got != want {
			t.Errorf("from %s: %q, want %q", dir, got, want)
		}
	}
}

// TestLockInactiveUnresponsive: a coordinator that holds the lock and
// accepts connections but does not answer is neither waited for nor
// called active (whose remedy, `lazaret stop`, would not answer either):
// its error, naming how to resume it, is returned at once.
func TestLockInactiveUnresponsive(t *testing.T) {
	paths, ln, holder := heldDomain(t)
	defer ln.Close()
	defer holder.Close()
	stuck := &client.UnresponsiveError{PID: 4242, Profile: "tiny", Bound: 10 * time.Second}
	liveStatus = func(domain.Paths, string) (*lv1.DomainStatus, error) { return nil, stuck }
	defer func() { liveStatus = client.LiveStatus }()
	lock, err := os.OpenFile(paths.LockFile(), os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	start := time.Now()
	err = lockInactive(lock, resolvedDomain{paths: paths, prof: profile{Name: "tiny"}}, "verify")
	if err == nil || !strings.Contains(err.Error(), "`kill -CONT 4242` resumes it") || strings.Contains(err.Error(), "is active") {
		t.Errorf("lockInactive over a coordinator that does not answer: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("it took %s: the refusal should be at once", d)
	}
}

// heldDomain makes the Domain of profile tiny and workspace /ws under a
// temporary Storage Root and runtime root, as a coordinator holds it: a
// listener on its control socket (accepting nothing) and its lifecycle
// lock held through holder.
func heldDomain(t *testing.T) (domain.Paths, net.Listener, *os.File) {
	t.Helper()
	base, err := os.MkdirTemp("", "lz-li-") // short: the socket path limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	roots := domain.Roots{Storage: filepath.Join(base, "s"), Runtime: filepath.Join(base, "r")}
	paths, err := domain.PathsFor(roots, domain.DeriveID("tiny", "/ws"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{roots.Runtime, paths.RuntimeDir, paths.DomainRoot} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o700)
	}
	ln, err := net.Listen("unix", paths.ControlSocket())
	if err != nil {
		t.Fatal(err)
	}
	holder, err := os.OpenFile(paths.LockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(holder.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return paths, ln, holder
}
