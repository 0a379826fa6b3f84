// Package trusteddir opens host directories and files that Lazaret trusts as
// host configuration — the kernel qualification records of package
// hostcheck — only after proving that nobody but their owner could have
// written them.
//
// A trusted directory is opened from the root one component at a time with
// openat(O_NOFOLLOW|O_DIRECTORY) on the verified parent descriptor, after
// the path was made canonical, so a symlink or a rename swapped in between
// fails the open instead of redirecting it. Every component is checked by
// fstat on the descriptor itself:
//
//   - an ancestor must be owned by root or the trusted owner and must not
//     be writable by group or others, except a root-owned sticky directory
//     (/tmp), where nobody else can rename or remove an entry;
//   - the directory itself must be owned by root or the trusted owner and
//     must not be writable by group or others at all;
//   - a file read from it must be a regular file with one link (another
//     link could sit in a tree someone else writes), owned by root or the
//     trusted owner, and not writable by group or others.
//
// A private directory (OpenPrivate: the runtime directories holding the
// control socket and the publication) must moreover be a real directory,
// never a symlink, owned by exactly its owner with no group or other
// permission; DialUnix connects to a socket in it through its descriptor
// and checks the listener's SO_PEERCRED.
//
// Every refusal is errdefs.ErrRefused and names the path and the command
// that fixes it. This is a primitive package: it makes the raw openat,
// fstat, renameat and fsync calls itself.
package trusteddir

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Dir is an open, verified trusted directory.
type Dir struct {
	fd    int
	path  string
	owner int
}

// Path is the canonical path the directory was opened at.
func (d *Dir) Path() string { return d.path }

// Close releases the directory descriptor.
func (d *Dir) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

func refuse(format string, args ...any) error {
	return errdefs.New(errdefs.ErrRefused, format, args...)
}

func ownerOK(st *unix.Stat_t, owner int) bool {
	return st.Uid == 0 || int(st.Uid) == owner
}

func ownerText(owner int) string {
	if owner == 0 {
		return "root"
	}
	return "root or uid " + strconv.Itoa(owner)
}

// checkDir verifies one directory component; leaf is the trusted directory
// itself (no group/other write even with the sticky bit).
func checkDir(p string, st *unix.Stat_t, owner int, leaf bool) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return refuse("%s is not a directory", p)
	}
	if !ownerOK(st, owner) {
		return refuse("%s is owned by uid %d, not %s: anyone owning it could plant trusted configuration; as root run `chown %d %s` (or move the directory)", p, st.Uid, ownerText(owner), owner, p)
	}
	if st.Mode&0o022 != 0 {
		if !leaf && st.Mode&unix.S_ISVTX != 0 && st.Uid == 0 {
			return nil // root-owned sticky directory such as /tmp
		}
		return refuse("%s is writable by its group or others (mode %04o): anyone in them could plant trusted configuration; run `chmod go-w %s`", p, st.Mode&0o7777, p)
	}
	return nil
}

// Open opens the existing directory path for the trusted owner (a uid; 0
// trusts root alone) after verifying every component from the root.
func Open(path string, owner int) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, errdefs.New(errdefs.ErrInvalid, "trusted directory %q is not an absolute path", path)
	}
	canon, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	fd, err := openChain(canon, owner, true)
	if err != nil {
		return nil, err
	}
	return &Dir{fd: fd, path: canon, owner: owner}, nil
}

// openChain opens canon component by component, verifying each.
func openChain(canon string, owner int, leafStrict bool) (int, error) {
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	parts := strings.Split(strings.TrimPrefix(canon, "/"), "/")
	if canon == "/" {
		parts = nil
	}
	cur := "/"
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			next, err := unix.Openat(fd, parts[i], unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			cur = filepath.Join(cur, parts[i])
			if err != nil {
				if err == unix.ELOOP || err == unix.ENOTDIR {
					return -1, refuse("%s changed while it was being verified (a symlink is there now): try again, and check who else can write its parent", cur)
				}
				return -1, &os.PathError{Op: "openat", Path: cur, Err: err}
			}
			fd = next
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, &os.PathError{Op: "fstat", Path: cur, Err: err}
		}
		if err := checkDir(cur, &st, owner, leafStrict && i == len(parts)-1); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// MkdirAll creates the missing components of path, each with exactly mode
// (the umask does not apply), and opens path as a trusted directory.
func MkdirAll(path string, owner int, mode os.FileMode) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, errdefs.New(errdefs.ErrInvalid, "trusted directory %q is not an absolute path", path)
	}
	var missing []string
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, p)
		if p == "/" {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], mode); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if err := os.Chmod(missing[i], mode); err != nil {
			return nil, err
		}
	}
	return Open(path, owner)
}

// Names lists the directory's entry names (without . and ..).
func (d *Dir) Names() ([]string, error) {
	dup, err := unix.Dup(d.fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), d.path)
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f.Readdirnames(-1)
}

// ErrTooLarge marks a trusted file larger than the caller's bound.
var ErrTooLarge = errors.New("trusted file too large")

// ReadFile reads the regular file name in the directory, at most max
// bytes, after verifying its type, link count, owner and mode.
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) {
	if strings.ContainsRune(name, '/') || name == "." || name == ".." || name == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "trusted file name %q must be one path component", name)
	}
	p := filepath.Join(d.path, name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, refuse("%s is a symbolic link: a trusted file must be a regular file; replace the link with the file it points to", p)
		}
		return nil, &os.PathError{Op: "openat", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, refuse("%s is not a regular file", p)
	case st.Nlink != 1:
		return nil, refuse("%s has %d hard links: another link could sit where someone else writes; keep one (copy it to a new file and remove the others)", p, st.Nlink)
	case !ownerOK(&st, d.owner):
		return nil, refuse("%s is owned by uid %d, not %s: as root run `chown %d %s`, or remove it", p, st.Uid, ownerText(d.owner), d.owner, p)
	case st.Mode&0o022 != 0:
		return nil, refuse("%s is writable by its group or others (mode %04o): run `chmod go-w %s`", p, st.Mode&0o7777, p)
	case st.Size > max:
		return nil, errdefs.Mark(fmt.Errorf("%s is %d bytes, more than %d: %w", p, st.Size, max, ErrTooLarge), errdefs.ErrInvalid)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: p, Err: err}
	}
	if int64(len(b)) > max {
		return nil, errdefs.Mark(fmt.Errorf("%s grew past %d bytes while read: %w", p, max, ErrTooLarge), errdefs.ErrInvalid)
	}
	return b, nil
}

// WriteFile atomically replaces name in the directory with data (mode):
// a temporary file is written, fsynced and renamed over name, and the
// directory fsynced, so a reader sees the old file or the complete new one.
func (d *Dir) WriteFile(name string, data []byte, mode os.FileMode) error {
	if strings.ContainsRune(name, '/') || name == "." || name == ".." || name == "" || strings.HasPrefix(name, ".tmp-") {
		return errdefs.New(errdefs.ErrInvalid, "trusted file name %q must be one path component", name)
	}
	tmp := ".tmp-" + name + "-" + strconv.Itoa(os.Getpid())
	fd, err := unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return &os.PathError{Op: "create", Path: filepath.Join(d.path, tmp), Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			unix.Unlinkat(d.fd, tmp, 0)
		}
	}()
	_, werr := f.Write(data)
	if werr == nil {
		werr = unix.Fchmod(fd, uint32(mode.Perm()))
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(d.path, name), werr)
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		return &os.PathError{Op: "rename", Path: filepath.Join(d.path, name), Err: err}
	}
	ok = true
	if err := unix.Fsync(d.fd); err != nil {
		return &os.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// checkPrivate verifies a private directory: a real directory owned by
// exactly owner with no group or other permission at all.
func checkPrivate(p string, st *unix.Stat_t, owner int) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return refuse("%s is not a directory: remove it and try again", p)
	}
	if int(st.Uid) != owner {
		return refuse("%s is owned by uid %d, not by you (uid %d): another user may have created it to impersonate Lazaret; as root remove it (`rm -rf %s`), or set XDG_RUNTIME_DIR to your own private directory", p, st.Uid, owner, p)
	}
	if st.Mode&0o077 != 0 {
		return refuse("%s has mode %04o; Lazaret needs it private to you: run `chmod 700 %s`", p, st.Mode&0o7777, p)
	}
	return nil
}

// OpenPrivate opens the existing directory path as a private directory of
// owner: path itself is never followed if it is a symlink (its parent is
// made canonical and verified as Open verifies ancestors), and it must be
// owned by owner with mode 0700 or stricter.
func OpenPrivate(path string, owner int) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, errdefs.New(errdefs.ErrInvalid, "private directory %q is not an absolute path", path)
	}
	path = filepath.Clean(path)
	parent, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	pfd, err := openChain(parent, owner, false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	d := &Dir{fd: pfd, path: parent, owner: owner}
	return d.openPrivateAt(filepath.Base(path))
}

// OpenPrivate opens the private directory name inside d without following
// a symlink (see the package OpenPrivate).
func (d *Dir) OpenPrivate(name string) (*Dir, error) {
	if strings.ContainsRune(name, '/') || name == "." || name == ".." || name == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "private directory name %q must be one path component", name)
	}
	return d.openPrivateAt(name)
}

func (d *Dir) openPrivateAt(name string) (*Dir, error) {
	p := filepath.Join(d.path, name)
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return nil, refuse("%s is not a real directory (a symlink or a file is there): another user or program may be redirecting Lazaret; remove it and try again", p)
		}
		if err == unix.EACCES {
			var st unix.Stat_t
			if unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				if cerr := checkPrivate(p, &st, d.owner); cerr != nil {
					return nil, cerr
				}
			}
		}
		return nil, &os.PathError{Op: "openat", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if err := checkPrivate(p, &st, d.owner); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Dir{fd: fd, path: p, owner: d.owner}, nil
}

// PeerCred is SO_PEERCRED of conn: the process at the other end when the
// connection was made (the listener for a dialled one, the dialler for an
// accepted one).
func PeerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// PeerPID is the pid of the process that listened on conn's socket when
// it connected (SO_PEERCRED), 0 when it cannot be read.
func PeerPID(conn *net.UnixConn) int {
	cred, err := PeerCred(conn)
	if err != nil {
		return 0
	}
	return int(cred.Pid)
}

// ErrPeer marks a socket whose server is not the trusted owner.
var ErrPeer = errors.New("socket peer is not the trusted owner")

// DialUnix connects to the stream socket name inside the directory —
// through the directory's descriptor, so the path cannot be redirected
// after verification — and verifies with SO_PEERCRED that the process
// listening is the directory's owner.
func (d *Dir) DialUnix(name string) (*net.UnixConn, error) {
	if strings.ContainsRune(name, '/') || name == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "socket name %q must be one path component", name)
	}
	via := "/proc/self/fd/" + strconv.Itoa(d.fd) + "/" + name
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: via, Net: "unix"})
	if err != nil {
		return nil, err
	}
	cred, cerr := PeerCred(conn)
	if cerr != nil {
		conn.Close()
		return nil, fmt.Errorf("SO_PEERCRED of %s: %w", filepath.Join(d.path, name), cerr)
	}
	if int(cred.Uid) != d.owner {
		conn.Close()
		return nil, errdefs.Mark(fmt.Errorf("%s is served by uid %d (pid %d), not by you (uid %d): another user is impersonating Lazaret; nothing was sent. Remove %s as root and report it: %w", filepath.Join(d.path, name), cred.Uid, cred.Pid, d.owner, d.path, ErrPeer), errdefs.ErrRefused)
	}
	return conn, nil
}
