package pidfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// NamespaceHolders observes, independently of any recorded process, what
// keeps the namespace (nsfs dev, ino) of kind ("mnt", "net", ...) alive: the
// PIDs whose /proc/<pid>/ns/<kind> is that namespace and, in the caller's
// own mount namespace, any nsfs bind mount of it. A namespace with neither
// is gone, and with it every mount that existed only in it (spec §3.5
// mount-absence proof). Processes whose namespace links are unreadable
// (another user's) cannot have joined a namespace owned by this user's
// user namespace without CAP_SYS_ADMIN over it; they are counted in
// unreadable, not trusted away silently.
//
// The kernel reuses a freed namespace's nsfs inode for the next new one, so
// (dev, ino) alone may name another, younger namespace. A mount namespace's
// never-reused ID (NS_GET_MNTNS_ID), when nonzero, decides: a process or
// bind whose namespace has the same (dev, ino) but another ID is not a
// holder. One whose ID cannot be read is counted as a holder (fail closed).
// id must be 0 for kinds other than "mnt".
func NamespaceHolders(kind string, dev, ino, id uint64) (pids []int, binds []string, unreadable int, err error) {
	if dev == 0 || ino == 0 {
		return nil, nil, 0, errdefs.New(errdefs.ErrInvalid, "namespace identity %d:%d is incomplete", dev, ino)
	}
	if id != 0 && kind != "mnt" {
		return nil, nil, 0, errdefs.New(errdefs.ErrInvalid, "a namespace ID is only compared for mount namespaces, not %q", kind)
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil, nil, 0, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, nil, 0, err
	}
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat("/proc/"+n+"/ns/"+kind, &st); err != nil {
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				unreadable++
			}
			continue // ENOENT: the process exited meanwhile
		}
		if uint64(st.Dev) == dev && st.Ino == ino && sameMountNamespace("/proc/"+n+"/ns/"+kind, dev, ino, id) {
			pids = append(pids, pid)
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return pids, nil, unreadable, err
	}
	defer f.Close()
	want := fmt.Sprintf("%s:[%d]", kind, ino)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts ... - fstype source superopts
		fs := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fs {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fs) || len(fs) < 5 || fs[sep+1] != "nsfs" {
			continue
		}
		if (fs[3] == want || strings.HasSuffix(fs[3], "/"+want)) && sameMountNamespace(unescapeMountinfo(fs[4]), dev, ino, id) {
			binds = append(binds, fs[4])
		}
	}
	return pids, binds, unreadable, sc.Err()
}

// sameMountNamespace reports whether the namespace file at path, already
// seen with nsfs (dev, ino), is the namespace with unique ID id. With id 0
// (no ID recorded) the (dev, ino) match stands. The file is reopened and
// its (dev, ino) and ID are read through that one descriptor: a path that
// has meanwhile vanished (the process exited) or names another namespace
// is not a match; one whose ID cannot be read is (fail closed).
func sameMountNamespace(path string, dev, ino, id uint64) bool {
	if id == 0 {
		return true
	}
	gdev, gino, gid, err := MountNamespaceOfPath(path)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
		return false
	}
	if err != nil || gid == 0 {
		return true
	}
	return gdev == dev && gino == ino && gid == id
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
