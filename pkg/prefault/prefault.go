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
// only syscall, so the runtime's initialisation order (packages sorted by
// import path, each as soon as its imports are) runs it right after
// package syscall, ahead of every heavy initialiser.
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

import "syscall"

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
	for _, m := range readOnlyMappings(maps, exe) {
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, m.start, m.end-m.start, madvPopulateRead); e != 0 {
			return total
		}
		total += m.end - m.start
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

// mapping is one address range of /proc/PID/maps.
type mapping struct{ start, end uintptr }

// readOnlyMappings returns the ranges of the maps file's lines for path
// that are private and neither writable nor shared.
func readOnlyMappings(maps []byte, path string) []mapping {
	var out []mapping
	for len(maps) > 0 {
		line := maps
		if i := indexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		if m, ok := parseLine(line, path); ok {
			out = append(out, m)
		}
	}
	return out
}

// parseLine parses "start-end perms offset dev inode pathname" and
// reports whether it is a read-only private mapping of path.
func parseLine(line []byte, path string) (mapping, bool) {
	var f [5][]byte
	rest := line
	for i := range f {
		rest = trimSpaces(rest)
		j := indexByte(rest, ' ')
		if j < 0 {
			return mapping{}, false
		}
		f[i], rest = rest[:j], rest[j:]
	}
	if string(trimSpaces(rest)) != path {
		return mapping{}, false
	}
	perms := f[1]
	if len(perms) != 4 || perms[0] != 'r' || perms[1] == 'w' || perms[3] != 'p' {
		return mapping{}, false
	}
	dash := indexByte(f[0], '-')
	if dash < 0 {
		return mapping{}, false
	}
	start, ok1 := parseHex(f[0][:dash])
	end, ok2 := parseHex(f[0][dash+1:])
	if !ok1 || !ok2 || end <= start {
		return mapping{}, false
	}
	return mapping{start, end}, true
}

func parseHex(b []byte) (uintptr, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uintptr
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uintptr(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uintptr(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func trimSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}
