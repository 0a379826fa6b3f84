// Package prefault maps the executable's code and read-only data into the
// process in one step, before the program's other packages initialise.
//
// A process that starts runs code and reads tables spread over its whole
// binary: package initialisation alone (protobuf and pebble registrations,
// crypto self-tests, regular expressions) touches hundreds of places, and
// every first touch of a page is a page fault, which maps at most the
// kernel's fault-around window (64 KiB). On the machines Lazaret is
// measured on a fault costs 14 µs or more, while madvise(MADV_POPULATE_READ)
// maps the 18 MiB of lazaret-hc from the page cache in about 0.6 ms: the
// trap per fault, not the mapping, is the cost. lazaret-hc took about 800
// such faults on its binary before its Domain was published, lazaret-rs
// about 430.
//
// Importing the package for its side effect (the mains of lazaret,
// lazaret-hc and lazaret-rs do) runs the populate in its init. It imports
// only syscall and pkg/procmaps (which imports nothing), so the runtime's
// initialisation order (packages sorted by import path, each as soon as its
// imports are) runs it right after those two, ahead of every heavy
// initialiser.
//
// Only private mappings of the executable that are neither writable nor
// shared are populated: the writable data segment would be copied and the
// BSS allocated. What is mapped is clean page cache shared with every other
// process running the binary; an idle process gives its pages back
// (pkg/idlemem). A kernel without MADV_POPULATE_READ (before 5.14) refuses
// the advice, and the process faults its pages in as before.
//
// This is a primitive package: its raw madvise lives here.
package prefault

import (
	"syscall"

	"github.com/lazaret/lazaret/pkg/procmaps"
)

// madvPopulateRead is MADV_POPULATE_READ (Linux 5.14).
const madvPopulateRead = 22

// Populated is the number of bytes of the executable's read-only mappings
// the init populated (0 if it could not).
var Populated uintptr

func init() {
	Populated = populateExecutable()
}

// populateExecutable populates the read-only private mappings of the
// process's executable and returns their total size.
func populateExecutable() uintptr {
	var buf [4096]byte
	n, err := syscall.Readlink("/proc/self/exe", buf[:])
	if err != nil || n <= 0 || n == len(buf) {
		return 0
	}
	exe := string(buf[:n])
	maps, err := readFile("/proc/self/maps")
	if err != nil {
		return 0
	}
	var total uintptr
	for _, m := range procmaps.ReadOnly(maps, exe) {
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, m.Start, m.End-m.Start, madvPopulateRead); e != 0 {
			return total
		}
		total += m.End - m.Start
	}
	return total
}

// readFile reads a small file whole with plain syscalls.
func readFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer syscall.Close(fd)
	out := make([]byte, 0, 16<<10)
	var buf [8192]byte
	for {
		n, err := syscall.Read(fd, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}
