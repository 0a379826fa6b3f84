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
// Events the daemon causes itself (the sandbox creating, writing,
// chmod-ing or renaming host files through it) mostly need no
// invalidation — the kernel already knows — and invalidating would cost a
// new LOOKUP or GETATTR round trip. So an event is checked against what
// the kernel was told, and only a difference invalidates:
//   - a name event (create, delete, rename) of name in a directory: the
//     inode the name holds in the routed workspace now (or none) is
//     compared with the inode the kernel knows under that name (go-fuse's
//     tree, or the outcome of the daemon's own change of that name in the
//     last selfWindow, which the kernel is being told while the tree
//     catches up);
//   - a content or attribute event of a known inode: its size, mtime and
//     ctime now are compared with those last sent to the kernel for it
//     (every LOOKUP, GETATTR, SETATTR and CREATE reply records them).
//     The host's timestamps are fine-grained once queried (multigrain
//     ctime), so a host change after the daemon's last stat always shows.
//     The kernel's page cache agrees with the attributes it holds: a reply
//     with a changed mtime or size makes it drop the cached data itself
//     (FUSE_AUTO_INVAL_DATA).
// A difference, or any error while checking, invalidates; so a host change
// is not hidden by a change of the daemon's own — with one window of
// microseconds: a host write to a file landing between the daemon's own
// write to it and its fstat of the result (fileio.go, wrote) is taken for
// the daemon's, and the sandbox's cached pages of that file may miss it
// until the file changes again.

// The sandbox is not a FUSE client of gVisor here: the daemon mounts in
// the host kernel (in RS's namespaces) and runsc's gofer reaches the mount
// with ordinary host syscalls (--file-access-mounts=shared revalidates each
// dentry with a stat, which the kernel answers from this cache).

// cacheTimeout is the lifetime of entries and attributes of watched paths.
var cacheTimeout = time.Minute

// shortTimeout is the lifetime once a host directory could not be watched
// (host changes then become visible inside within this bound).
var shortTimeout = time.Second

// selfWindow is how long the outcome of the daemon's own change of a name
// is remembered (its events arrive within milliseconds).
var selfWindow = 2 * time.Second

type selfKey struct {
	dir  *fs.Inode
	name string
}

// selfRec is the daemon's own change of a name: when, and the stable inode
// number the name holds after it (0: none; unknownIno: not known).
type selfRec struct {
	at  time.Time
	ino uint64
}

// unknownIno marks a change whose outcome is not (yet) known.
const unknownIno = ^uint64(0)

// attrStamp is what the kernel was last told about an inode's attributes.
type attrStamp struct {
	ino, size           uint64
	mtimeSec, mtimeNsec int64
	ctimeSec, ctimeNsec int64
}

func stampOf(b backend, st *unix.Stat_t) *attrStamp {
	return &attrStamp{ino: stable(b, st).Ino, size: uint64(st.Size),
		mtimeSec: st.Mtim.Sec, mtimeNsec: st.Mtim.Nsec, ctimeSec: st.Ctim.Sec, ctimeNsec: st.Ctim.Nsec}
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
	ended  bool            // endWatches ran: no watch is added any more
	now    func() time.Time
	selfMu sync.Mutex
	selfAt map[selfKey]selfRec // the daemon's own recent changes
	// r answers what the routed workspace holds now.
	r *Router
}

// self records the daemon's own change of name in the host directory dir
// and, if known, the stable inode number it leaves there.
func (w *hostWatch) self(dir *fs.Inode, name string, ino uint64) {
	if w == nil || dir == nil {
		return
	}
	now := w.now()
	w.selfMu.Lock()
	defer w.selfMu.Unlock()
	if len(w.selfAt) > 1<<16 {
		for k, r := range w.selfAt {
			if now.Sub(r.at) > selfWindow {
				delete(w.selfAt, k)
			}
		}
	}
	w.selfAt[selfKey{dir, name}] = selfRec{at: now, ino: ino}
}

// bySelf returns the outcome of the daemon's own change of name in dir
// within selfWindow, if any.
func (w *hostWatch) bySelf(dir *fs.Inode, name string) (uint64, bool) {
	w.selfMu.Lock()
	defer w.selfMu.Unlock()
	r, ok := w.selfAt[selfKey{dir, name}]
	if !ok || w.now().Sub(r.at) > selfWindow {
		return 0, false
	}
	return r.ino, true
}

// watched reports whether the host directory inode ino is watched.
func (w *hostWatch) watched(ino uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byIno[ino]
}

// entryCurrent reports whether the kernel's entry for name in dir matches
// the routed workspace now (see the top of this file).
func (w *hostWatch) entryCurrent(dir *fs.Inode, name string) bool {
	d, ok := dir.Operations().(*node)
	if !ok || w.r == nil {
		return false
	}
	var st unix.Stat_t
	now := uint64(0)
	b, err := w.r.locate(join(d.rel(), name), &st)
	switch {
	case err == nil:
		now = stable(b, &st).Ino
	case errno(err) != unix.ENOENT:
		return false
	}
	known := uint64(0)
	if c := dir.GetChild(name); c != nil {
		known = c.StableAttr().Ino
	}
	if known == now {
		return true
	}
	ino, ok := w.bySelf(dir, name)
	for i := 0; ok && ino == unknownIno && i < settleTries; i++ {
		time.Sleep(settleStep) // the daemon's own change is in progress
		ino, ok = w.bySelf(dir, name)
	}
	return ok && ino == now
}

// A change of the daemon's own still in progress when its event is read is
// waited for up to settleTries*settleStep before the event is judged (an
// unsettled one invalidates).
const (
	settleTries = 50
	settleStep  = 100 * time.Microsecond
)

// attrsCurrent reports whether the attributes last sent to the kernel for
// in are still those of the routed workspace.
func (w *hostWatch) attrsCurrent(in *fs.Inode) bool {
	n, ok := in.Operations().(*node)
	if !ok || w.r == nil {
		return false
	}
	for i := 0; n.busy.Load() > 0 && i < settleTries; i++ {
		time.Sleep(settleStep) // the daemon's own change is in progress
	}
	sent := n.sent.Load()
	if sent == nil || n.busy.Load() > 0 {
		return false
	}
	var st unix.Stat_t
	b, err := w.r.locate(n.rel(), &st)
	return err == nil && *stampOf(b, &st) == *sent
}

func newHostWatch(log *slog.Logger) (*hostWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &hostWatch{fd: fd, log: log, byWD: map[int32]*fs.Inode{}, byIno: map[uint64]bool{}, now: time.Now, selfAt: map[selfKey]selfRec{}}, nil
}

// add watches the host directory dfd (an O_PATH descriptor of the resolved
// directory, so the watch is exactly that inode) for the kernel inode in.
func (w *hostWatch) add(in *fs.Inode, dfd int, ino uint64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended || w.byIno[ino] {
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
		changed := map[*fs.Inode]bool{}
		// A gitfile the host made (created, then written: either event
		// may be the first to find it complete) for a submodule it set up
		// in a directory the kernel knows.
		for _, evs := range []map[key]bool{entries, contents} {
			for k := range evs {
				if k.name != ".git" || w.r == nil {
					continue
				}
				if dir := w.inode(k.wd); dir != nil && !dir.IsRoot() {
					if d, ok := dir.Operations().(*node); ok && w.r.seedLate(d.rel()) {
						entries[k] = true
					}
				}
			}
		}
		for k := range entries {
			dir := w.inode(k.wd)
			if dir == nil {
				continue
			}
			if !w.entryCurrent(dir, k.name) {
				dir.NotifyEntry(k.name)
				changed[dir] = true
			}
		}
		for dir := range changed {
			// Its mtime (and so the kernel's cached listing) changed.
			dir.NotifyContent(0, 0)
		}
		for k := range contents {
			dir := w.inode(k.wd)
			switch {
			case dir == nil:
			case k.name == "":
				if !w.attrsCurrent(dir) {
					dir.NotifyContent(0, 0)
				}
			case !entries[k]:
				if c := dir.GetChild(k.name); c != nil && !w.attrsCurrent(c) {
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

// endWatches removes every watch, for a daemon whose sandbox is stopping:
// host changes need no invalidation any more. It is what makes the
// daemon's exit quick: closing an inotify instance waits until the
// kernel has freed its watches, an SRCU grace period (8-20 ms measured
// here) that the Runtime Supervisor would wait for in the daemon's exit;
// removed now, the watches are freed in the background while the sandbox
// stops, and the close at exit finds none.
func (w *hostWatch) endWatches() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	for wd := range w.byWD {
		unix.InotifyRmWatch(w.fd, uint32(wd))
	}
	clear(w.byWD)
	clear(w.byIno)
}

// close stops run.
func (w *hostWatch) close() {
	if w != nil {
		unix.Close(w.fd)
	}
}
