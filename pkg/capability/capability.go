// Package capability drops Linux capabilities from every thread of a Go
// process (all of them but a kept set, one of them, or the inheritable and
// ambient ones a spawn kept) and reads what the threads of a process still
// hold.
//
// Capability sets, the bounding set and no_new_privs are per-thread
// attributes, and a Go process has many threads the runtime created, so
// every change goes through syscall.AllThreadsSyscall (which exists only in
// CGO_ENABLED=0 builds, as all four Lazaret binaries are). This is a
// primitive package: it makes the raw prctl and capset calls itself.
package capability

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Last is the highest capability number of the running kernel.
func Last() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("the kernel's last capability: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 || n >= 64 {
		return 0, fmt.Errorf("the kernel's last capability: %q is no capability number", b)
	}
	return n, nil
}

// lastCap is Last, or 63 when it cannot be read.
func lastCap() int {
	if n, err := Last(); err == nil {
		return n
	}
	return 63 // PR_CAPBSET_DROP of an unknown capability fails with EINVAL, ignored below
}

// ErrThisThreadOnly reports that the runtime cannot change every thread
// at once: a binary linked with cgo, where syscall.AllThreadsSyscall is
// unavailable.
var ErrThisThreadOnly = errors.New("capabilities can be changed on the calling thread only (a cgo build)")

// ClearInheritable empties the inheritable set, and with it the ambient
// set (the kernel keeps ambient within inheritable), of every thread, or
// of the calling thread only with thisThreadOnly; effective, permitted and
// bounding sets are unchanged. A process whose spawn kept its
// capabilities as ambient ones (package proc) holds afterwards what a
// process executed as its user namespace's root holds. For every thread
// it returns ErrThisThreadOnly, having changed nothing, when the runtime
// cannot reach them all.
func ClearInheritable(thisThreadOnly bool) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if thisThreadOnly {
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			return fmt.Errorf("capset without inheritable capabilities: %w", err)
		}
		return nil
	}
	switch _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e {
	case 0:
		return nil
	case unix.ENOTSUP:
		return ErrThisThreadOnly
	default:
		return fmt.Errorf("capset without inheritable capabilities: %w", e)
	}
}

// DropAll irreversibly empties the bounding, ambient, effective, permitted
// and inheritable sets of every thread and sets no_new_privs on every
// thread, so neither this process nor anything it executes can hold a
// capability again.
func DropAll() error { return Keep(0) }

// Mask is a set of capabilities (bit c for capability c).
type Mask uint64

// Of is the mask of the capabilities cs.
func Of(cs ...int) Mask {
	var m Mask
	for _, c := range cs {
		m |= 1 << uint(c)
	}
	return m
}

// Keep irreversibly reduces every thread to exactly the capabilities in
// keep (which it must hold): the bounding set loses every other one, the
// effective and permitted sets become keep, the inheritable and ambient
// sets are emptied, and no_new_privs is set, so nothing it executes gains
// any.
func Keep(keep Mask) error {
	if err := Bound(keep); err != nil {
		return err
	}
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 && e != unix.EINVAL {
		return fmt.Errorf("clear the ambient set: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Effective, data[0].Permitted = uint32(keep), uint32(keep)
	data[1].Effective, data[1].Permitted = uint32(keep>>32), uint32(keep>>32)
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset to no capabilities: %w", e)
	}
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("set no_new_privs: %w", e)
	}
	return nil
}

// Bound irreversibly removes from the bounding set of every thread each
// capability outside keep; the effective, permitted, inheritable and
// ambient sets are unchanged, so a capability it removes is still used
// until Keep (or capset) removes it there too. A process that keeps a
// privileged step for later (the Git-routing daemon's mount) bounds its
// threads first: each drop stops the world to run on every thread, and
// the fewer threads the process has yet, the cheaper that is (measured:
// the ~35 drops after the daemon's mount cost 6–16 ms of its start on two
// busy cores). Capabilities the calling thread's bounding set already
// lacks are skipped without stopping the world: every change Lazaret's
// binaries make to a bounding set goes through this package, on every
// thread, so the calling thread's set is every thread's.
func Bound(keep Mask) error {
	// Read once: each read of /proc is a file open.
	last := lastCap()
	for c := 0; c <= last; c++ {
		if keep&(1<<uint(c)) != 0 {
			continue
		}
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in == 0 {
			continue
		}
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e != 0 && e != unix.EINVAL {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, e)
		}
	}
	return nil
}

// Drop irreversibly removes one capability c from the effective,
// permitted, inheritable, ambient and bounding sets of every thread,
// keeping every other capability.
func Drop(c int) error {
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e != 0 {
		return fmt.Errorf("drop capability %d from the bounding set: %w", c, e)
	}
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_LOWER, uintptr(c), 0, 0, 0); e != 0 && e != unix.EINVAL {
		return fmt.Errorf("lower ambient capability %d: %w", c, e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	bit := uint32(1) << (c % 32)
	data[c/32].Effective &^= bit
	data[c/32].Permitted &^= bit
	data[c/32].Inheritable &^= bit
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset without capability %d: %w", c, e)
	}
	return nil
}

// ThreadsHold reports whether any thread of process pid still has
// capability c in any set.
func ThreadsHold(pid, c int) (bool, error) {
	held, _, err := Held(pid)
	if err != nil {
		return false, err
	}
	for _, h := range held {
		_, mask, _ := strings.Cut(h, "=")
		if v, err := strconv.ParseUint(mask, 16, 64); err == nil && v&(1<<uint(c)) != 0 {
			return true, nil
		}
	}
	return false, nil
}

// Beyond reports, for each thread of pid that holds a capability outside
// allowed in any set, "TID CapXxx=MASK" entries; empty when none does.
// noNewPrivs is false when any thread lacks no_new_privs.
func Beyond(pid int, allowed Mask) (held []string, noNewPrivs bool, err error) {
	all, nnp, err := Held(pid)
	for _, h := range all {
		_, mask, _ := strings.Cut(h, "=")
		if v, perr := strconv.ParseUint(mask, 16, 64); perr != nil || Mask(v)&^allowed != 0 {
			held = append(held, h)
		}
	}
	return held, nnp, err
}

// Held describes the capabilities threads of a process hold: for each
// thread that holds any, "TID CapXxx=MASK" entries; empty when none does.
// noNewPrivs is false when any thread lacks no_new_privs.
func Held(pid int) (held []string, noNewPrivs bool, err error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, false, err
	}
	noNewPrivs = true
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			v = strings.TrimSpace(v)
			switch {
			case k == "NoNewPrivs" && v != "1":
				noNewPrivs = false
			case strings.HasPrefix(k, "Cap"):
				caps, err := strconv.ParseUint(v, 16, 64)
				if err != nil {
					return nil, false, fmt.Errorf("parse %s of thread %s: %w", k, t.Name(), err)
				}
				if caps != 0 {
					held = append(held, fmt.Sprintf("%s %s=%s", t.Name(), k, v))
				}
			}
		}
	}
	return held, noNewPrivs, nil
}
