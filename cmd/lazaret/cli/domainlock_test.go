package cli

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/domain"
)

// TestDomainRunningReadsProcLocks: a held Domain lock is seen from
// /proc/locks, and asking does not take the lock (a holder that arrives
// later is never refused by the probe).
func TestDomainRunningReadsProcLocks(t *testing.T) {
	paths, err := domain.PathsFor(domain.Roots{Storage: t.TempDir(), Runtime: t.TempDir()}, domain.ID("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if domainRunning(paths) {
		t.Fatal("a Domain without a lock file runs")
	}
	os.MkdirAll(paths.DomainRoot, 0o700)
	f, err := os.OpenFile(paths.LockFile(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if domainRunning(paths) {
		t.Fatal("an unlocked Domain runs")
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if !domainRunning(paths) {
		t.Fatal("a locked Domain does not run")
	}
	// The table alone says so, without a flock probe.
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	if !newLockTable(string(locks)).exact[lockKeyOf(t, paths)] {
		t.Fatalf("/proc/locks lacks the lock file:\n%s", locks)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	// A table naming the inode on another device (a filesystem whose stat
	// device is not its lock device) falls back to probing by flock.
	k := lockKeyOf(t, paths)
	other := newLockTable(fmt.Sprintf("1: FLOCK  ADVISORY  WRITE 1 %02x:%02x:%d 0 EOF\n", k.major+1, k.minor, k.ino))
	if other.held(paths) {
		t.Error("an unlocked Domain named on another device runs")
	}
	unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if !other.held(paths) {
		t.Error("a locked Domain named on another device does not run")
	}
	if newLockTable("").held(paths) {
		t.Error("a table without the inode says it runs")
	}
}

func lockKeyOf(t *testing.T, paths domain.Paths) lockKey {
	var st unix.Stat_t
	if err := unix.Stat(paths.LockFile(), &st); err != nil {
		t.Fatal(err)
	}
	return lockKey{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}
}
