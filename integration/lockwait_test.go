package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDX5WaitForHeldDomainLock (DX-5): a run that finds the Domain lock
// held by something that serves no session (a coordinator stuck in its
// teardown; here the harness holds the lock) tells the developer after a
// few seconds what it waits for and how to look, instead of waiting
// silently for up to three minutes; `lazaret status` shows the Domain
// stopping, not stopped; the run proceeds once the lock is free.
func TestDX5WaitForHeldDomainLock(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("first run: %+v", r)
	}
	noLeftovers(t)
	canon, _ := filepath.EvalSymlinks(ws)
	lock, err := os.OpenFile(filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(canon, "tiny")), "lifecycle.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	c := e.cmd(ws, nil, "run", "-p", "tiny", "--", "echo", "joined")
	var stdout, stderr syncBuffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	done := make(chan struct{})
	go func() { waitErr = c.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		default:
			c.Process.Kill() // the process this test started
			<-done
		}
	}()
	notice := "the Domain is busy: its lock is held and no coordinator serves it (one still stopping, or a `lazaret state` or `rm` command at work); waiting, up to 3m0s in all — `lazaret logs -C " + canon + " -p tiny` shows what its coordinator is doing"
	if !waitUntil(20*time.Second, 100*time.Millisecond, func() bool { return strings.Contains(stderr.String(), notice) }) {
		t.Fatalf("no notice after 20 s of waiting for the held lock; stderr %q", stderr.String())
	}
	if r := lz(t, ws, nil, "status", "-C", ws); !strings.Contains(r.stdout, "stopping") || !strings.Contains(r.stdout, "its lock is held and no coordinator serves it") {
		t.Errorf("status while the lock is held:\n%s", r.stdout)
	}
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	select {
	case <-done:
		if waitErr != nil || stdout.String() != "joined\n" {
			t.Fatalf("the waiting run after the lock was freed: %v %q %q", waitErr, stdout.String(), stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the waiting run did not go on within a minute of the lock's release")
	}
	noLeftovers(t)
}
