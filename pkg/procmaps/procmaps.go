// Package procmaps reads address ranges from a /proc/PID/maps file
// (proc_pid_maps(5)): which parts of a process's address space map which
// file, and how.
//
// It imports nothing, so pkg/prefault can use it and still initialise
// before every package with a costly init (pkg/prefault's
// TestImportsOnlySyscall holds both packages to that).
package procmaps

// Mapping is one address range of a maps file, End exclusive.
type Mapping struct{ Start, End uintptr }

// ReadOnly returns the ranges of maps's lines for the file path that are
// readable, private and neither writable nor shared: an executable's code
// and read-only data (not its data segment, which a write would copy).
// The pathname field must equal path exactly, so the mappings of a file
// replaced since ("path (deleted)") are not path's. Lines it cannot parse
// are skipped.
func ReadOnly(maps []byte, path string) []Mapping {
	var out []Mapping
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
func parseLine(line []byte, path string) (Mapping, bool) {
	var f [5][]byte
	rest := line
	for i := range f {
		rest = trimSpaces(rest)
		j := indexByte(rest, ' ')
		if j < 0 {
			return Mapping{}, false
		}
		f[i], rest = rest[:j], rest[j:]
	}
	if string(trimSpaces(rest)) != path {
		return Mapping{}, false
	}
	perms := f[1]
	if len(perms) != 4 || perms[0] != 'r' || perms[1] == 'w' || perms[3] != 'p' {
		return Mapping{}, false
	}
	dash := indexByte(f[0], '-')
	if dash < 0 {
		return Mapping{}, false
	}
	start, ok1 := parseHex(f[0][:dash])
	end, ok2 := parseHex(f[0][dash+1:])
	if !ok1 || !ok2 || end <= start {
		return Mapping{}, false
	}
	return Mapping{start, end}, true
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
