package cli

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/domain"
)

// TestLockInactiveWaitsForEndingTeardown: a coordinator whose teardown
// ends between the CLI's connection and its status request (here: a
// listener that goes during the status request, its lock released a
// little later) is not reported active; the lock is waited for and taken
// once released. TestRmRefusals covers the other side: a socket that still
// answers without a status (a starting coordinator) is active.
func TestLockInactiveWaitsForEndingTeardown(t *testing.T) {
	base, err := os.MkdirTemp("", "lz-li-") // short: the socket path limit
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	roots := domain.Roots{Storage: filepath.Join(base, "s"), Runtime: filepath.Join(base, "r")}
	id := domain.DeriveID("tiny", "/ws")
	paths, err := domain.PathsFor(roots, id)
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
