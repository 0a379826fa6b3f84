package stickyignore

import (
	"encoding/binary"
	"errors"
	"os"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statetree"
)

// Classifier reports whether a workspace-relative path is routed to
// Ignored Workspace State (for Scan: by the generation's ignore rules or
// an already sticky path).
type Classifier func(rel string, isDir bool) bool

// Found is one existing routed path Scan found.
type Found struct {
	Path string
	// Type is the host entry's type when the host has one, else the
	// state's (statetree.FileType).
	Type string
	// Host and State report where it exists.
	Host, State bool
}

// FoundIn is "host", "state" or "host+state".
func (f Found) FoundIn() string {
	switch {
	case f.Host && f.State:
		return "host+state"
	case f.State:
		return "state"
	}
	return "host"
}

// scanResolve confines every lookup beneath the root being walked. Unlike
// the state trees' maintenance (statetree) it crosses mounts: the router
// serves a workspace that spans filesystems.
const scanResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Scan walks the host workspace and the Ignored Workspace State directory
// stateDir together and returns, sorted, every path that exists in either
// and that routed routes to state (for the entry's type there), without
// descending into it: the granularity at which the router routes. Other
// directories are descended into on both sides (a host directory that is
// not ignored; a state "mirror" directory). ".git" entries are skipped at
// every depth. A missing state directory is an empty one; a directory that
// cannot be read (another owner's private mode) is skipped, as the router
// cannot serve it either.
func Scan(workspace, stateDir string, routed Classifier) ([]Found, error) {
	return ScanWith(workspace, stateDir, routed, nil)
}

// EnterHook runs for each host directory a scan enters, before the
// directory's entries are classified, with the directory's descriptor and
// the type of its ".gitignore" entry (0: it has none); an error ends the
// scan. A caller whose Classifier follows the workspace's ignore rules adds
// the directory's own rules here, as Git reads them, parents before
// children and none inside an excluded directory, in the same walk.
type EnterHook func(rel string, dirfd int, gitignore uint8) error

// ScanWith is Scan that runs enter (nil: nothing) for each host directory
// it enters, the workspace root first.
func ScanWith(workspace, stateDir string, routed Classifier, enter EnterHook) ([]Found, error) {
	host, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errdefs.Mark(&os.PathError{Op: "open workspace", Path: workspace, Err: err}, errdefs.ErrUnavailable)
	}
	state, err := unix.Open(stateDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		state = -1
	} else if err != nil {
		unix.Close(host)
		return nil, &os.PathError{Op: "open Ignored Workspace State", Path: stateDir, Err: err}
	}
	var out []Found
	err = scanDir(host, state, "", routed, enter, &out, 0)
	if out == nil {
		out = []Found{}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}

// scanDir scans one directory level; it closes hfd and sfd (-1: absent).
func scanDir(hfd, sfd int, rel string, routed Classifier, enter EnterHook, out *[]Found, depth int) error {
	defer func() {
		if hfd >= 0 {
			unix.Close(hfd)
		}
		if sfd >= 0 {
			unix.Close(sfd)
		}
	}()
	if depth > statetree.MaxDepth {
		return errdefs.New(errdefs.ErrRefused, "%s: directory nesting deeper than %d", rel, statetree.MaxDepth)
	}
	hostEntries := readTypes(hfd)
	if enter != nil && hfd >= 0 {
		t, ok := hostEntries[".gitignore"]
		if ok && t == unix.DT_UNKNOWN {
			t = typeAt(hfd, ".gitignore")
		}
		if err := enter(rel, hfd, t); err != nil {
			return err
		}
	}
	stateEntries := readTypes(sfd)
	names := make([]string, 0, len(hostEntries)+len(stateEntries))
	for n := range hostEntries {
		names = append(names, n)
	}
	for n := range stateEntries {
		if _, ok := hostEntries[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if n == ".git" {
			continue // the Git Sentry's and the router's own rule, not ignore rules
		}
		p := n
		if rel != "" {
			p = rel + "/" + n
		}
		ht, inHost := hostEntries[n]
		st, inState := stateEntries[n]
		if inHost && ht == unix.DT_UNKNOWN {
			ht = typeAt(hfd, n)
		}
		if inState && st == unix.DT_UNKNOWN {
			st = typeAt(sfd, n)
		}
		hostRouted := inHost && routed(p, ht == unix.DT_DIR)
		stateRouted := inState && routed(p, st == unix.DT_DIR)
		if hostRouted || stateRouted {
			f := Found{Path: p, Host: inHost, State: inState}
			if inHost {
				f.Type = typeName(ht)
			} else {
				f.Type = typeName(st)
			}
			*out = append(*out, f)
			continue
		}
		ch, cs := -1, -1
		if inHost && ht == unix.DT_DIR {
			ch = openDir(hfd, n)
		}
		if inState && st == unix.DT_DIR {
			cs = openDir(sfd, n)
		}
		if ch < 0 && cs < 0 {
			continue
		}
		if err := scanDir(ch, cs, p, routed, enter, out, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// openDir opens directory name of dirfd for reading, never through a
// symlink; -1 when it cannot.
func openDir(dirfd int, name string) int {
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: scanResolve}
	for {
		fd, err := unix.Openat2(dirfd, name, how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1
		}
		return fd
	}
}

// readTypes lists a directory descriptor's entries with their getdents
// type (DT_UNKNOWN where the filesystem gives none); nil for -1 or an
// unreadable directory.
func readTypes(fd int) map[string]uint8 {
	if fd < 0 {
		return nil
	}
	out := map[string]uint8{}
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return out
		}
		for b := buf[:n]; len(b) >= 19; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return out
			}
			typ := b[18]
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			if s := string(name); s != "." && s != ".." {
				out[s] = typ
			}
			b = b[reclen:]
		}
	}
}

// typeAt lstat()s name in dirfd for a filesystem without getdents types.
func typeAt(dirfd int, name string) uint8 {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return unix.DT_UNKNOWN
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFLNK:
		return unix.DT_LNK
	case unix.S_IFIFO:
		return unix.DT_FIFO
	case unix.S_IFSOCK:
		return unix.DT_SOCK
	case unix.S_IFCHR:
		return unix.DT_CHR
	case unix.S_IFBLK:
		return unix.DT_BLK
	}
	return unix.DT_UNKNOWN
}

func typeName(t uint8) string {
	switch t {
	case unix.DT_REG:
		return "file"
	case unix.DT_DIR:
		return "dir"
	case unix.DT_LNK:
		return "symlink"
	case unix.DT_FIFO:
		return "fifo"
	case unix.DT_SOCK:
		return "socket"
	case unix.DT_UNKNOWN:
		return "unknown"
	}
	return "device"
}
