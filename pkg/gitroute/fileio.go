package gitroute

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// File I/O without OPEN. The daemon answers the first FUSE OPEN of a
// regular file with ENOSYS, which the kernel takes as "this filesystem
// does not need opens" (fc->no_open): from then on opening and closing a
// file in the sandbox costs no round trip at all — no OPEN, no RELEASE —
// and the kernel keeps the page cache across opens (the daemon invalidates
// it on host changes, see watch.go). runsc's gofer opens and closes host
// files whenever its dentry cache churns (a warm `git status` of 5,000
// files: ~520 OPEN/RELEASE pairs; an untar: two opens per file), so this
// removes most of the daemon's requests.
//
// READ, WRITE, FSYNC and FALLOCATE then arrive with no file handle, and
// the node serves them from descriptors of its own inode. Reads use a
// read-only descriptor opened on first use and kept until the kernel
// forgets the node (at most maxCachedFDs at once; beyond that each read
// opens and closes its own). Writes open a write-only descriptor per
// request and close it at once: a descriptor open for writing makes the
// host refuse to execute the file (ETXTBSY), and a developer must be able
// to run on the host what the sandbox just built. Every descriptor names
// the inode the kernel knows: it is opened by path only while the inode
// number there still matches (else ESTALE), so a file replaced on the host
// under the same name (an editor's save) is never read or written through
// the old node, and an unlinked file the sandbox still reads keeps working
// through the kept descriptor.

// maxCachedFDs bounds the read descriptors kept by nodes (lowered at
// mount to a quarter of the open-file limit if that is less).
var maxCachedFDs int64 = 4096

// cachedFDs counts the read descriptors nodes keep.
var cachedFDs atomic.Int64

// fileFD is a node's kept descriptor: read-only, or read-write once the
// daemon itself unlinked or replaced the node's name (orphan). pin is the
// O_PATH descriptor that keeps the inode of a deleted node of any other
// type but a directory allocated (pinned: pinNumber).
type fileFD struct {
	mu     sync.RWMutex
	fd     int
	ok     bool
	acc    int
	pin    int
	pinned bool
}

// keep makes fd the node's kept read descriptor if it has none and the
// budget allows; it reports whether it kept it.
func (n *node) keep(fd int) bool {
	n.io.mu.Lock()
	defer n.io.mu.Unlock()
	if n.io.ok {
		return false
	}
	if cachedFDs.Add(1) > maxCachedFDs {
		cachedFDs.Add(-1)
		return false
	}
	n.io.fd, n.io.ok, n.io.acc = fd, true, unix.O_RDONLY
	return true
}

// orphan keeps a descriptor of the node's inode — read-write if it can —
// before the daemon unlinks or renames over its name base in dfd: the
// sandbox may still have the file open, and reads and writes through it
// must keep working after the name is gone (no path names it then). The
// descriptor also keeps the inode's number allocated until the kernel
// forgets the node, which a node of another type gets from pinNumber.
func (n *node) orphan(dfd int, base string) {
	switch n.StableAttr().Mode {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return
	default:
		n.pinNumber(dfd, base)
		return
	}
	fd, acc := -1, unix.O_RDWR
	for _, a := range []int{unix.O_RDWR, unix.O_RDONLY} {
		if fd = n.openOwn(dfd, base, a); fd >= 0 {
			acc = a
			break
		}
	}
	if fd < 0 {
		return
	}
	n.io.mu.Lock()
	defer n.io.mu.Unlock()
	if n.io.ok {
		if n.io.acc == unix.O_RDWR || acc != unix.O_RDWR {
			unix.Close(fd)
			return
		}
		unix.Close(n.io.fd) // a read-write one replaces the read-only one
	} else {
		cachedFDs.Add(1) // beyond the budget all the same: it cannot be re-opened
	}
	n.io.fd, n.io.ok, n.io.acc = fd, true, acc
}

// withFD calls f with a descriptor of the node's own inode open for
// reading (write=false) or writing.
func (n *node) withFD(write bool, f func(fd int) error) syscall.Errno {
	if write && n.guardedNode(n.backend()) {
		return unix.EROFS
	}
	n.io.mu.RLock()
	if n.io.ok && (!write || n.io.acc == unix.O_RDWR) {
		defer n.io.mu.RUnlock()
		return errno(f(n.io.fd))
	}
	n.io.mu.RUnlock()
	acc := unix.O_RDONLY
	if write {
		acc = unix.O_WRONLY
	}
	fd, err := n.openIO(acc)
	if err != nil {
		return errno(err)
	}
	if !write && n.keep(fd) {
		return n.withFD(false, f)
	}
	defer unix.Close(fd)
	return errno(f(fd))
}

// openIO opens the node's inode with access mode acc; the descriptor must
// name the node's inode.
//
// The backend is the node's own (its inode number says which), so one
// confined open and one fstat do: the open never follows a symlink, and a
// name that holds another inode now (or no regular file) is ESTALE.
func (n *node) openIO(acc int) (int, error) {
	b := n.backend()
	rel := n.rel()
	if b == hostBackend && n.r.Ignored(rel, false) {
		return -1, unix.ESTALE // host content at an ignored path is never opened
	}
	fd, err := openBeneath(n.r.roots[b], rel, acc|unix.O_NONBLOCK, 0)
	if err != nil {
		if errno(err) == unix.ENOENT {
			return -1, unix.ESTALE
		}
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || stable(b, &st).Ino != n.StableAttr().Ino || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, unix.ESTALE
	}
	return fd, nil
}

// backend is where the node's inode lives (its inode number says which).
func (n *node) backend() backend {
	if n.StableAttr().Ino&stateInoBit != 0 {
		return stateBackend
	}
	return hostBackend
}

// keptStat fstat()s the node's kept descriptor, if it has one: the
// attributes of exactly the node's inode, also once no name holds it.
func (n *node) keptStat(st *unix.Stat_t) (backend, bool) {
	ok, err := n.withKept(func(b backend, fd int) error { return unix.Fstat(fd, st) })
	return n.backend(), ok && err == nil
}

// withKept calls f with the node's kept descriptor (and its backend), if
// it has one; it reports whether it did.
func (n *node) withKept(f func(b backend, fd int) error) (bool, error) {
	n.io.mu.RLock()
	defer n.io.mu.RUnlock()
	if !n.io.ok {
		return false, nil
	}
	return true, f(n.backend(), n.io.fd)
}

// openOwn opens base in dfd with flags (never following a symlink) and
// returns the descriptor if it names the node's own inode, else -1.
func (n *node) openOwn(dfd int, base string, flags int) int {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC), Resolve: resolveFlags}
	fd, err := unix.Openat2(dfd, base, &how)
	if err != nil {
		return -1
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Ino != n.StableAttr().Ino&^stateInoBit {
		unix.Close(fd)
		return -1
	}
	return fd
}

// pinNumber keeps an O_PATH descriptor of a symlink, FIFO, socket or
// device node before the daemon unlinks or renames over its name base in
// dfd, until the kernel forgets the node. Nothing goes through it: it
// keeps the inode, and so its number, allocated while the sandbox may
// still hold the deleted file. The daemon reports the host's inode
// numbers, and gVisor's gofer client gives every file it meets under a
// (device, inode number) it still holds the inode it holds: without the
// pin, ext4 hands the freed number to the next file created (at once, on
// a busy directory), and in the sandbox that new regular file was a
// symlink — the deleted one, with its size and target. (A regular file
// keeps its number through orphan's descriptor; directories do not meet
// this.)
func (n *node) pinNumber(dfd int, base string) {
	fd := n.openOwn(dfd, base, unix.O_PATH)
	if fd < 0 {
		return
	}
	n.io.mu.Lock()
	defer n.io.mu.Unlock()
	if n.io.pinned {
		unix.Close(fd)
		return
	}
	n.io.pin, n.io.pinned = fd, true
}

// OnForget closes the node's descriptors once the kernel has forgotten
// it.
func (n *node) OnForget() {
	n.io.mu.Lock()
	defer n.io.mu.Unlock()
	if n.io.ok {
		unix.Close(n.io.fd)
		n.io.ok = false
		cachedFDs.Add(-1)
	}
	if n.io.pinned {
		unix.Close(n.io.pin)
		n.io.pinned = false
	}
}

// Open turns file opens off (see the top of this file).
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, syscall.ENOSYS
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	var k int
	e := n.withFD(false, func(fd int) error {
		var err error
		k, err = preadFull(fd, dest, off)
		return err
	})
	if e != 0 {
		return nil, e
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// preadFull reads until dest is full or EOF (the kernel expects a short
// read only at the end of the file).
func preadFull(fd int, dest []byte, off int64) (int, error) {
	total := 0
	for total < len(dest) {
		k, err := unix.Pread(fd, dest[total:], off+int64(total))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, err
		}
		if k == 0 {
			break
		}
		total += k
	}
	return total, nil
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	defer n.changing()()
	var k int
	e := n.withFD(true, func(fd int) error {
		var err error
		for {
			k, err = unix.Pwrite(fd, data, off)
			if err != unix.EINTR {
				break
			}
		}
		if err == nil {
			n.wrote(fd)
		}
		return err
	})
	return uint32(k), e
}

// wrote records the attributes after the daemon's own write through fd:
// the kernel drops its cached size and times after every FUSE write and
// fetches them again, so these are what it will hold (watch.go).
func (n *node) wrote(fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil {
		n.sent.Store(stampOf(n.backend(), &st))
	} else {
		n.sent.Store(nil)
	}
}

// Flush is not implemented: the files are written through, there is
// nothing to flush on close, and answering ENOSYS once makes the kernel
// stop sending it.
func (n *node) Flush(ctx context.Context, f fs.FileHandle) syscall.Errno { return syscall.ENOSYS }

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	// fsync through a read-only descriptor syncs the inode all the same.
	return n.withFD(false, func(fd int) error {
		if flags&1 != 0 { // FUSE_FSYNC_FDATASYNC
			return unix.Fdatasync(fd)
		}
		return unix.Fsync(fd)
	})
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	defer n.changing()()
	return n.withFD(true, func(fd int) error {
		if err := unix.Fallocate(fd, mode, int64(off), int64(size)); err != nil {
			return err
		}
		n.wrote(fd)
		return nil
	})
}

func (n *node) Lseek(ctx context.Context, f fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	var r int64
	e := n.withFD(false, func(fd int) error {
		var err error
		r, err = unix.Seek(fd, int64(off), int(whence))
		return err
	})
	return uint64(r), e
}

// Compile-time checks.
var (
	_ fs.NodeReader      = (*node)(nil)
	_ fs.NodeWriter      = (*node)(nil)
	_ fs.NodeFlusher     = (*node)(nil)
	_ fs.NodeFsyncer     = (*node)(nil)
	_ fs.NodeAllocater   = (*node)(nil)
	_ fs.NodeLseeker     = (*node)(nil)
	_ fs.NodeOnForgetter = (*node)(nil)
)
