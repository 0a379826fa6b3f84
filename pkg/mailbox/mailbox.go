// Package mailbox holds the Host Coordinator's confined directory handles of
// the Escalation Mailbox (spec §3.7). Every entry is opened relative to a
// directory descriptor with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV) and O_NOFOLLOW|O_NONBLOCK, so a
// symlink, a FIFO, a device or a directory planted by the sandbox is refused
// without blocking or following it; a regular file is bounded by fstat
// before any buffer is allocated and read exactly once. Results are written
// to a temporary name and renamed into place, so a reader never sees a
// partial record. Names are never authentication: records carry
// signatures (package record).
package mailbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Dir is a confined directory handle.
type Dir struct {
	fd   int
	path string // for messages only
}

// OpenDir opens the directory at path (which must not be a symlink).
func OpenDir(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open mailbox directory %s: %w", path, err)
	}
	return &Dir{fd: fd, path: path}, nil
}

// Close closes the handle.
func (d *Dir) Close() error {
	if d == nil || d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// Path is the directory's path (for messages).
func (d *Dir) Path() string { return d.path }

func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || len(name) > 255 {
		return errdefs.New(errdefs.ErrRefused, "bad mailbox entry name %q", name)
	}
	return nil
}

func (d *Dir) openat(name string, flags int, mode uint32) (int, error) {
	if err := validName(name); err != nil {
		return -1, err
	}
	for {
		fd, err := unix.Openat2(d.fd, name, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
			Mode:    uint64(mode),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		})
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// Names returns up to max entry names (unsorted; "." and ".." omitted).
func (d *Dir) Names(max int) ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(max)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("list %s: %w", d.path, err)
	}
	return names, nil
}

// ErrVanished reports an entry removed before it was opened.
var ErrVanished = errdefs.New(errdefs.ErrUnavailable, "mailbox entry vanished")

// ErrNotRegular refuses a link, FIFO, device, socket or directory entry.
var ErrNotRegular = errdefs.New(errdefs.ErrRefused, "mailbox entry is not a regular file")

// ReadEntry reads the regular file name once, refusing anything that is not
// a regular file reached without a link, larger than max bytes, or that
// changed size while it was read. The entry is unlinked whatever the outcome
// (a refused entry never comes back).
func (d *Dir) ReadEntry(name string, max int) ([]byte, error) {
	b, err := d.readEntry(name, max)
	d.Remove(name)
	return b, err
}

func (d *Dir) readEntry(name string, max int) ([]byte, error) {
	fd, err := d.openat(name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return nil, errdefs.New(errdefs.ErrRefused, "mailbox entry %q is a link: refused", name)
		case errors.Is(err, unix.ENOENT):
			return nil, ErrVanished
		}
		return nil, fmt.Errorf("open mailbox entry %q: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat mailbox entry %q: %w", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%q (mode %o): %w", name, st.Mode&unix.S_IFMT, ErrNotRegular)
	}
	if st.Size > int64(max) {
		return nil, errdefs.New(errdefs.ErrRefused, "mailbox entry %q of %d bytes exceeds %d", name, st.Size, max)
	}
	buf := make([]byte, st.Size+1) // one spare byte detects growth
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read mailbox entry %q: %w", name, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	if int64(n) != st.Size {
		return nil, errdefs.New(errdefs.ErrRefused, "mailbox entry %q changed size while read (%d of %d bytes)", name, n, st.Size)
	}
	return buf[:n], nil
}

// Remove unlinks the entry name (a file; ignored if absent).
func (d *Dir) Remove(name string) {
	if validName(name) != nil {
		return
	}
	if err := unix.Unlinkat(d.fd, name, 0); err == unix.EISDIR || err == unix.EPERM {
		d.RemoveAll(name)
	}
}

// Publish writes data as entry name by writing a temporary entry and
// renaming it into place.
func (d *Dir) Publish(name string, data []byte) error {
	if err := validName(name); err != nil {
		return err
	}
	tmp := ".tmp-" + name
	fd, err := d.openat(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s/%s: %w", d.path, tmp, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(d.fd, tmp, d.fd, name)
	}
	if werr != nil {
		unix.Unlinkat(d.fd, tmp, 0)
		return fmt.Errorf("publish %s/%s: %w", d.path, name, werr)
	}
	return nil
}

// Mkdir creates the subdirectory name (0755: the sandbox reads results
// through its read-only mount) and returns its handle.
func (d *Dir) Mkdir(name string) (*Dir, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := unix.Mkdirat(d.fd, name, 0o755); err != nil {
		return nil, fmt.Errorf("create %s/%s: %w", d.path, name, err)
	}
	fd, err := d.openat(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s/%s: %w", d.path, name, err)
	}
	return &Dir{fd: fd, path: d.path + "/" + name}, nil
}

// RemoveAll removes the subdirectory name and the files in it (one level:
// the mailbox has no deeper trees; deeper content is left and reported).
func (d *Dir) RemoveAll(name string) error {
	if err := validName(name); err != nil {
		return err
	}
	fd, err := d.openat(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == nil {
		sub := &Dir{fd: fd, path: d.path + "/" + name}
		names, _ := sub.Names(-1)
		for _, n := range names {
			unix.Unlinkat(sub.fd, n, 0)
		}
		sub.Close()
	}
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return fmt.Errorf("remove %s/%s: %w", d.path, name, err)
	}
	return nil
}

// DirBeneath opens rel (a clean relative path, "" for root itself), which
// must be a directory beneath root reached without any symlink, and returns
// it held open (O_PATH): an escalation's working directory is resolved once
// and the host command enters exactly that directory through the
// descriptor (HeldPath), never by name again, so a symlink swapped in
// afterwards cannot move it out of the workspace.
func DirBeneath(root, rel string) (*os.File, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	if rel == "" {
		return os.NewFile(uintptr(rfd), root), nil
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, rel, &unix.OpenHow{
		Flags:   uint64(unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("working directory %q is not a directory beneath the workspace reached without symlinks: %w", rel, err), errdefs.ErrInvalid)
	}
	return os.NewFile(uintptr(fd), root+"/"+rel), nil
}

// FileBeneath opens rel, which must be a regular file beneath the held
// directory dir reached without any symlink (O_RDONLY, close-on-exec).
func FileBeneath(dir *os.File, rel string) (*os.File, error) {
	fd, err := unix.Openat2(int(dir.Fd()), rel, &unix.OpenHow{
		Flags:   uint64(unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("%q is not a file beneath the working directory reached without symlinks: %w", rel, err), errdefs.ErrInvalid)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		unix.Close(fd)
		return nil, errdefs.New(errdefs.ErrInvalid, "%q is not an executable regular file beneath the working directory", rel)
	}
	return os.NewFile(uintptr(fd), dir.Name()+"/"+rel), nil
}

// HeldPath is the path through which a process reaches exactly the file or
// directory f holds, even after fork (the child inherits the descriptor
// until exec): /proc/self/fd/N, a magic link resolved to the open file, not
// to a name.
func HeldPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// Watcher wakes a reader whenever an entry may have appeared in a
// directory (inotify: a rename into it, a file closed after writing, any
// entry created — links, FIFOs and directories included, so that they are
// refused promptly too). A wake-up says only "scan again"; the queue
// overflowing is a wake-up as well.
type Watcher struct {
	f *os.File
	// C receives at most one pending wake-up.
	C    chan struct{}
	done chan struct{}
}

// Watch starts watching the directory. The watch is placed through the
// handle's own descriptor (/proc/self/fd), not by path.
func (d *Dir) Watch() (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(d.fd), unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE|unix.IN_CREATE|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", d.path, os.NewSyscallError("inotify_add_watch", err))
	}
	w := &Watcher{f: os.NewFile(uintptr(fd), "inotify:"+d.path), C: make(chan struct{}, 1), done: make(chan struct{})}
	go w.read()
	return w, nil
}

func (w *Watcher) read() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		// The events themselves are not needed: the reader rescans.
		if _, err := w.f.Read(buf); err != nil {
			return // closed
		}
		select {
		case w.C <- struct{}{}:
		default: // a wake-up is pending
		}
	}
}

// Close stops the watcher.
func (w *Watcher) Close() error {
	if w == nil {
		return nil
	}
	err := w.f.Close()
	<-w.done
	return err
}
