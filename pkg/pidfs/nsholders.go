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
func NamespaceHolders(kind string, dev, ino uint64) (pids []int, binds []string, unreadable int, err error) {
	if dev == 0 || ino == 0 {
		return nil, nil, 0, errdefs.New(errdefs.ErrInvalid, "namespace identity %d:%d is incomplete", dev, ino)
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
		if uint64(st.Dev) == dev && st.Ino == ino {
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
		if fs[3] == want || strings.HasSuffix(fs[3], "/"+want) {
			binds = append(binds, fs[4])
		}
	}
	return pids, binds, unreadable, sc.Err()
}
