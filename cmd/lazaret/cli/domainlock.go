package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/domain"
)

// domainRunning reports whether something holds the Domain lock (its
// coordinator, while the generation lives). It reads /proc/locks: taking
// the lock, even for an instant, could make a `lazaret run` starting
// meanwhile fail its attempt and retry (and `logs -f` and `network
// --follow` ask every 300 ms).
func domainRunning(paths domain.Paths) bool { return runningProbe()(paths) }

// runningProbe is domainRunning with /proc/locks read once, for a command
// that asks of every Domain (ls, rm).
func runningProbe() func(domain.Paths) bool {
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return flockHeld
	}
	return newLockTable(string(locks)).held
}

// lockTable is what /proc/locks says is locked, read once.
type lockTable struct {
	exact map[lockKey]bool
	inode map[uint64]bool
}

type lockKey struct {
	major, minor uint32
	ino          uint64
}

func newLockTable(procLocks string) lockTable {
	t := lockTable{exact: lockedInodes(procLocks), inode: map[uint64]bool{}}
	for k := range t.exact {
		t.inode[k.ino] = true
	}
	return t
}

// held reports whether the Domain's lock file is locked. /proc/locks names
// a file by the device of its filesystem, which stat reports differently
// on some (a btrfs subvolume has a device of its own): when only the
// inode number matches, the lock is probed by flock instead.
func (t lockTable) held(paths domain.Paths) bool {
	var st unix.Stat_t
	if unix.Stat(paths.LockFile(), &st) != nil {
		return false
	}
	switch {
	case t.exact[lockKey{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}]:
		return true
	case t.inode[st.Ino]:
		return flockHeld(paths)
	}
	return false
}

// flockHeld probes the Domain lock by taking it for an instant.
func flockHeld(paths domain.Paths) bool {
	lock, err := os.OpenFile(paths.LockFile(), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	return false
}

// lockedInodes parses /proc/locks ("1: FLOCK ADVISORY WRITE 1234 00:2b:5678 0 EOF";
// blocked waiters, "->" lines, hold nothing).
func lockedInodes(s string) map[lockKey]bool {
	out := map[lockKey]bool{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] == "->" {
			continue
		}
		var k lockKey
		if _, err := fmt.Sscanf(f[5], "%x:%x:%d", &k.major, &k.minor, &k.ino); err == nil {
			out[k] = true
		}
	}
	return out
}
