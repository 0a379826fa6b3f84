package gitroute

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// Kernel caching. The kernel's FUSE client keeps entries (name → inode,
// including negative ones) and attributes for the lifetimes the daemon
// grants. Changes the sandbox makes go through the daemon, so the kernel
// updates its own cache; changes the developer makes on the host bypass
// it. The daemon therefore grants long lifetimes (cacheTimeout) and
// watches, with inotify, every host directory the kernel has looked up: a
// host create, delete, rename, write or attribute change in a watched
// directory invalidates exactly that entry (FUSE_NOTIFY_INVAL_ENTRY) or
// inode (FUSE_NOTIFY_INVAL_INODE), so host edits are visible inside within
// milliseconds. If a watch cannot be added (the per-user inotify limit), the
// daemon falls back to short lifetimes (shortTimeout) for everything; an
// event queue overflow invalidates every known entry.
//
// Name events the daemon causes itself (the sandbox creating, removing or
// renaming host entries through it) need no invalidation — the kernel
// already knows — and invalidating a just-created entry would cost a new
// lookup: a name event of a (directory, name) the daemon changed within
// selfWindow is skipped. A host create, delete or rename of that very name
// within that window is seen after cacheTimeout at the latest (an access
// to a stale entry reaches the daemon, which answers from the host).
// Content and attribute events are always honoured.
//
// The sandbox is not a FUSE client of gVisor here: the daemon mounts in
// the host kernel (in RS's namespaces) and runsc's gofer reaches the mount
// with ordinary host syscalls (--file-access-mounts=shared revalidates each
// dentry with a stat, which the kernel answers from this cache).

// cacheTimeout is the lifetime of entries and attributes of watched paths.
var cacheTimeout = time.Minute

// shortTimeout is the lifetime once a host directory could not be watched
// (host changes then become visible inside within this bound).
var shortTimeout = time.Second

// selfWindow is how long the daemon's own change of a name suppresses the
// inotify events of that name.
var selfWindow = 2 * time.Second

type selfKey struct {
	dir  *fs.Inode
	name string
}

// watchMask are the inotify events that invalidate the kernel's caches.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// hostWatch maps inotify watches of host directories to their inodes.
type hostWatch struct {
	fd     int
	log    *slog.Logger
	root   *fs.Inode
	mu     sync.Mutex
	byWD   map[int32]*fs.Inode
	byIno  map[uint64]bool // host directory inode numbers already watched
	failed atomic.Bool     // a watch could not be added: short lifetimes
	now    func() time.Time
	selfMu sync.Mutex
	selfAt map[selfKey]time.Time // the daemon's own recent changes
}

// self records that the daemon is about to change name in the host
// directory dir.
func (w *hostWatch) self(dir *fs.Inode, name string) {
	if w == nil || dir == nil {
		return
	}
	now := w.now()
	w.selfMu.Lock()
	defer w.selfMu.Unlock()
	if len(w.selfAt) > 1<<16 {
		for k, t := range w.selfAt {
			if now.Sub(t) > selfWindow {
				delete(w.selfAt, k)
			}
		}
	}
	w.selfAt[selfKey{dir, name}] = now
}

// bySelf reports whether the daemon changed name in dir within selfWindow.
func (w *hostWatch) bySelf(dir *fs.Inode, name string) bool {
	w.selfMu.Lock()
	defer w.selfMu.Unlock()
	t, ok := w.selfAt[selfKey{dir, name}]
	return ok && w.now().Sub(t) <= selfWindow
}

func newHostWatch(log *slog.Logger) (*hostWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &hostWatch{fd: fd, log: log, byWD: map[int32]*fs.Inode{}, byIno: map[uint64]bool{}, now: time.Now, selfAt: map[selfKey]time.Time{}}, nil
}

// add watches the host directory dfd (an O_PATH descriptor of the resolved
// directory, so the watch is exactly that inode) for the kernel inode in.
func (w *hostWatch) add(in *fs.Inode, dfd int, ino uint64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byIno[ino] {
		return
	}
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+itoa(dfd), watchMask)
	if err != nil {
		if !w.failed.Swap(true) {
			w.log.Warn("cannot watch a host directory: host changes now reach the sandbox within the short cache lifetime", "err", err, "short_timeout", shortTimeout)
		}
		return
	}
	w.byIno[ino] = true
	w.byWD[int32(wd)] = in
}

// short reports whether lifetimes must be short (a watch failed).
func (w *hostWatch) short() bool { return w == nil || w.failed.Load() }

// run reads events until the descriptor is closed and invalidates what
// they name. Events of one read are coalesced per (directory, name).
func (w *hostWatch) run() {
	buf := make([]byte, 64<<10)
	type key struct {
		wd   int32
		name string
	}
	for {
		n, err := unix.Read(w.fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		entries := map[key]bool{}  // name events: invalidate the entry
		contents := map[key]bool{} // content or attribute events
		overflow := false
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nb := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			for i, c := range nb {
				if c == 0 {
					nb = nb[:i]
					break
				}
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			k := key{ev.Wd, string(nb)}
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				overflow = true
			case ev.Mask&unix.IN_IGNORED != 0:
				w.forget(ev.Wd)
			case ev.Mask&(unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO) != 0:
				entries[k] = true
			case ev.Mask&(unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CLOSE_WRITE|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
				contents[k] = true
			}
		}
		if overflow {
			w.log.Warn("inotify queue overflow: invalidating every cached entry")
			w.invalidateAll()
			continue
		}
		for k := range entries {
			if dir := w.inode(k.wd); dir != nil && !w.bySelf(dir, k.name) {
				dir.NotifyEntry(k.name)
			}
		}
		for k := range contents {
			dir := w.inode(k.wd)
			switch {
			case dir == nil:
			case k.name == "":
				dir.NotifyContent(0, 0)
			case !entries[k]:
				if c := dir.GetChild(k.name); c != nil {
					c.NotifyContent(0, 0)
				}
			}
		}
	}
}

func (w *hostWatch) inode(wd int32) *fs.Inode {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byWD[wd]
}

// forget drops a watch the kernel removed (directory deleted or
// unmounted); its inode number may be watched again later.
func (w *hostWatch) forget(wd int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in := w.byWD[wd]; in != nil {
		delete(w.byIno, in.StableAttr().Ino)
	}
	delete(w.byWD, wd)
}

// invalidateAll invalidates every entry and inode the daemon knows.
func (w *hostWatch) invalidateAll() {
	if w.root == nil {
		return
	}
	var walk func(in *fs.Inode)
	walk = func(in *fs.Inode) {
		in.NotifyContent(0, 0)
		for name, c := range in.Children() {
			in.NotifyEntry(name)
			walk(c)
		}
	}
	walk(w.root)
}

// close stops run.
func (w *hostWatch) close() {
	if w != nil {
		unix.Close(w.fd)
	}
}
