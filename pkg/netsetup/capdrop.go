package netsetup

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DropNetAdmin irreversibly removes CAP_NET_ADMIN from the effective,
// permitted, inheritable, ambient and bounding sets of every thread of this
// process (SR-5), keeping every other capability (lease-loss teardown still
// unmounts). It uses syscall.AllThreadsSyscall, which exists only in
// CGO_ENABLED=0 builds (lazaret-rs is built so), and not a re-exec, which
// would kill the parent-death-coupled attached runsc client.
func DropNetAdmin() error {
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, unix.CAP_NET_ADMIN, 0); e != 0 {
		return fmt.Errorf("drop CAP_NET_ADMIN from the bounding set: %w", e)
	}
	if _, _, e := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_LOWER, unix.CAP_NET_ADMIN, 0, 0, 0); e != 0 && e != unix.EINVAL {
		return fmt.Errorf("lower ambient CAP_NET_ADMIN: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	bit := uint32(1) << (unix.CAP_NET_ADMIN % 32)
	idx := unix.CAP_NET_ADMIN / 32
	data[idx].Effective &^= bit
	data[idx].Permitted &^= bit
	data[idx].Inheritable &^= bit
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset without CAP_NET_ADMIN: %w", e)
	}
	return nil
}

// ThreadsHoldNetAdmin reports whether any thread of process pid still has
// CAP_NET_ADMIN in any set, reading /proc/<pid>/task/*/status.
func ThreadsHoldNetAdmin(pid int) (bool, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || !strings.HasPrefix(k, "Cap") {
				continue
			}
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("parse %s of thread %s: %w", k, t.Name(), err)
			}
			if caps&(1<<unix.CAP_NET_ADMIN) != 0 {
				return true, nil
			}
		}
	}
	return false, nil
}
