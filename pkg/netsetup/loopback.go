// Package netsetup prepares the Domain enforcement network namespace from
// inside the Runtime Supervisor. The foundation brings up loopback; the
// network issue adds derived-policy routes, slirp4netns and attestation.
//
// Preconditions: the caller holds CAP_NET_ADMIN in the namespace's owning
// user namespace (the Runtime Supervisor before its capability drop).
package netsetup

import (
	"os"

	"golang.org/x/sys/unix"
)

// LoopbackUp sets IFF_UP on lo in the current network namespace.
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("SIOCGIFFLAGS lo", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("SIOCSIFFLAGS lo", err)
	}
	return nil
}
