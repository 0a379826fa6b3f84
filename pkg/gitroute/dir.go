package gitroute

import (
	"context"
	"sort"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

type dirEntry struct {
	name string
	typ  uint8
	ino  uint64
}

// readEntries lists an open directory descriptor (without . and ..).
func readEntries(fd int) ([]dirEntry, error) {
	var out []dirEntry
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name
			reclen := int(buf[off+16]) | int(buf[off+17])<<8
			ino := uint64(0)
			for i := 7; i >= 0; i-- {
				ino = ino<<8 | uint64(buf[off+i])
			}
			typ := buf[off+18]
			nameb := buf[off+19 : off+reclen]
			for i, c := range nameb {
				if c == 0 {
					nameb = nameb[:i]
					break
				}
			}
			name := string(nameb)
			off += reclen
			if name == "." || name == ".." {
				continue
			}
			out = append(out, dirEntry{name: name, typ: typ, ino: ino})
		}
	}
}

func readNames(fd int) ([]string, error) {
	es, err := readEntries(fd)
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.name
	}
	return names, err
}

// list returns the merged listing of directory rel: the host's non-ignored
// entries and the state's ignored ones.
func (r *Router) list(rel string) ([]fuse.DirEntry, syscall.Errno) {
	var out []fuse.DirEntry
	seen := map[string]bool{}
	found := false
	for _, b := range []backend{stateBackend, hostBackend} {
		fd, err := openBeneath(r.roots[b], rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			continue
		}
		found = true
		es, err := readEntries(fd)
		unix.Close(fd)
		if err != nil {
			return nil, errno(err)
		}
		for _, e := range es {
			if seen[e.name] {
				continue
			}
			p := join(rel, e.name)
			isDir := e.typ == unix.DT_DIR
			if e.typ == unix.DT_UNKNOWN {
				var st unix.Stat_t
				if r.stat(b, p, &st) == nil {
					isDir = st.Mode&unix.S_IFMT == unix.S_IFDIR
				}
			}
			if r.Ignored(p, isDir) != (b == stateBackend) {
				continue // a state mirror directory, or hidden host content
			}
			seen[e.name] = true
			ino := e.ino
			if b == stateBackend {
				ino |= stateInoBit
			}
			out = append(out, fuse.DirEntry{Name: e.name, Mode: uint32(e.typ) << 12, Ino: ino})
		}
	}
	if !found {
		return nil, unix.ENOENT
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, 0
}

// dirHandle is an open directory that lists at its first read and
// re-lists on rewind. Not at open: a handle may be opened long before it
// is read (runsc's gofer keeps a directory's descriptor in its dentry, e.g.
// from tar's -C directory, and reads it later for rm -rf), and go-fuse
// asks for no rewind on the first read at offset 0, so a listing taken at
// open would hide every entry created meanwhile.
type dirHandle struct {
	r      *Router
	rel    string
	mu     sync.Mutex
	es     []fuse.DirEntry
	pos    int
	listed bool
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

// OpendirHandle opens a directory. The kernel may cache the listing
// (FOPEN_CACHE_DIR, kept across opens): it starts over whenever the
// directory changes through the mount (its version changes) or its mtime
// does when read from the start, and the host watch invalidates a watched
// directory's attributes on every host change of its names. A warm
// `git status` then lists its directories without a request.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{r: n.r, rel: n.rel()}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

func (h *dirHandle) refresh() syscall.Errno {
	es, e := h.r.list(h.rel)
	if e != 0 {
		return e
	}
	for i := range es {
		es[i].Off = uint64(i + 1)
	}
	h.es, h.pos, h.listed = es, 0, true
	return 0
}

func (h *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.listed {
		if e := h.refresh(); e != 0 {
			return nil, e
		}
	}
	if h.pos >= len(h.es) {
		return nil, 0
	}
	e := h.es[h.pos]
	h.pos++
	return &e, 0
}

func (h *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 || !h.listed {
		if e := h.refresh(); e != 0 || off == 0 {
			return e
		}
	}
	if off > uint64(len(h.es)) {
		off = uint64(len(h.es))
	}
	h.pos = int(off)
	return 0
}

func (h *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return 0 }
