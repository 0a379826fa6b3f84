package rs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/statetree"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("LAZARET_ALLOW_SKIP") == "1" {
			t.Skip("LAZARET_ALLOW_SKIP=1: needs root (chown)")
		}
		t.Fatal("needs root (chown); run unit tests as root (make unit)")
	}
}

// chownTree over a tree wider than its queue (so walkers both queue and
// descend themselves) and deeper than one level changes exactly the
// entries its rule names, counts them, never follows a symlink, leaves the
// root itself alone, and gives the same result with one walker or many.
func TestChownTreeWalksEverythingOnce(t *testing.T) {
	needRoot(t)
	for _, procs := range []int{1, 4} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			root := t.TempDir()
			outside := filepath.Join(t.TempDir(), "outside")
			os.WriteFile(outside, []byte("x"), 0o644)
			os.Chown(outside, 4242, 4242)
			os.Chown(root, 777, 777)
			foreign := 0
			mk := func(p string, dir bool, uid int) {
				t.Helper()
				var err error
				if dir {
					err = os.Mkdir(p, 0o700)
				} else {
					err = os.WriteFile(p, []byte("x"), 0o600)
				}
				if err == nil {
					err = os.Lchown(p, uid, uid)
				}
				if err != nil {
					t.Fatal(err)
				}
				if uid != 0 {
					foreign++
				}
			}
			for i := range treeWalkQueue + 44 {
				d := filepath.Join(root, fmt.Sprintf("pkg%03d", i))
				mk(d, true, []int{0, 101000}[i%2])
				for j := range 3 {
					mk(filepath.Join(d, fmt.Sprintf("f%d", j)), false, []int{0, 101001, 5000}[j])
				}
				if i%50 == 0 {
					deep := d
					for k := range 20 {
						deep = filepath.Join(deep, fmt.Sprintf("d%d", k))
						mk(deep, true, 102000)
					}
					mk(filepath.Join(deep, "leaf"), false, 102001)
				}
			}
			if err := os.Symlink(outside, filepath.Join(root, "pkg000", "link")); err != nil {
				t.Fatal(err)
			}
			os.Lchown(filepath.Join(root, "pkg000", "link"), 4243, 4243)
			foreign++
			fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			n, err := chownTree(fd, toDeveloper)
			if err != nil {
				t.Fatal(err)
			}
			if n != foreign {
				t.Errorf("changed %d entries, want %d", n, foreign)
			}
			var left []string
			filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if p != root && (st.Uid != 0 || st.Gid != 0) {
					left = append(left, p)
				}
				return nil
			})
			if len(left) > 0 {
				t.Errorf("%d entries not given back, e.g. %s", len(left), left[0])
			}
			var st unix.Stat_t
			unix.Stat(outside, &st)
			if st.Uid != 4242 {
				t.Errorf("the symlink was followed: its target belongs to %d", st.Uid)
			}
			unix.Stat(root, &st)
			if st.Uid != 777 {
				t.Errorf("the walk's own directory was changed: %d", st.Uid)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
				t.Errorf("the caller's descriptor was closed: %v", err)
			}
		})
	}
}

// A tree deeper than statetree.MaxDepth is refused, and a failed walk
// leaves no descriptor open.
func TestChownTreeRefusesTooDeep(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cur, _ := unix.Dup(fd)
	for range statetree.MaxDepth + 2 {
		next, err := statetree.MkdirBeneath(cur, "d", 0o755)
		unix.Close(cur)
		if err != nil {
			t.Fatal(err)
		}
		cur = next
	}
	unix.Close(cur)
	before := openDescriptors(t)
	_, err = chownTree(fd, toDeveloper)
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("walk of a tree %d deep: %v, want ErrRefused", statetree.MaxDepth+2, err)
	}
	if after := openDescriptors(t); after != before {
		t.Errorf("%d descriptors open after the walk, %d before", after, before)
	}
}

func openDescriptors(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
