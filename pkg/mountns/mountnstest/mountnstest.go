// Package mountnstest runs a test's mount scenario in a private mount
// namespace of its own, for the packages whose mounts are tested for real
// (mountns, anchor, statetree).
package mountnstest

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// InPrivateNamespace runs f on a locked OS thread that has entered a new
// mount namespace with every mount private, so nothing f mounts reaches
// the host; f's error fails t. It needs root: without it the test fails,
// or skips when LAZARET_ALLOW_SKIP=1 and CI is not set (CI runs the unit
// tests as root: a missing root there is a broken runner).
func InPrivateNamespace(t *testing.T, f func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("LAZARET_ALLOW_SKIP") == "1" && os.Getenv("CI") == "" {
			t.Skip("LAZARET_ALLOW_SKIP=1: needs root for a mount namespace")
		}
		t.Fatal("needs root (a private mount namespace); run unit tests as root (make unit)")
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with its namespace
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
