package proc

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

// lastCapability is the highest capability number the running kernel
// knows.
func lastCapability() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read the kernel's last capability: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 8)
	if err != nil {
		return 0, fmt.Errorf("read the kernel's last capability: %q: %w", b, err)
	}
	return uintptr(n), nil
}

// errThisThreadOnly reports that the runtime cannot change the
// credentials of every thread at once (a binary linked with cgo).
var errThisThreadOnly = errors.New("capabilities can be changed on this thread only")

// capHeader and capData are capset(2)'s arguments for
// dropKeptCapabilities, in static storage: the call passes their addresses
// as plain integers, which must not move while every thread uses them.
var (
	capHeader = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	capData   [2]unix.CapUserData
)

// dropKeptCapabilities empties the inheritable set, and with it the
// ambient set (the kernel keeps ambient within inheritable), of every
// thread of this process, or of the calling thread only when allThreads is
// false; permitted and effective are unchanged. A wrapper spawned with
// Command.KeepCapabilities carries them in both sets; a target executed as
// its namespace's root has neither. With allThreads it returns
// errThisThreadOnly, having changed nothing, when the runtime cannot
// reach every thread.
func dropKeptCapabilities(allThreads bool) error {
	if err := unix.Capget(&capHeader, &capData[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if capData[0].Inheritable == 0 && capData[1].Inheritable == 0 {
		return nil
	}
	capData[0].Inheritable, capData[1].Inheritable = 0, 0
	if !allThreads {
		if err := unix.Capset(&capHeader, &capData[0]); err != nil {
			return fmt.Errorf("capset: %w", err)
		}
		return nil
	}
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&capHeader)), uintptr(unsafe.Pointer(&capData[0])), 0)
	switch errno {
	case 0:
		return nil
	case unix.ENOTSUP:
		return errThisThreadOnly
	default:
		return fmt.Errorf("capset on every thread: %w", errno)
	}
}
