//go:build lazaret_bench

package integration

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cpuGroup is a cgroup v2 directory one measured command runs in, so that
// the CPU time of everything it starts (the coordinator and the sandbox
// outlive the CLI, daemonized) is read from its cpu.stat. On two cores the
// cold start is CPU-bound, so its CPU per start is the figure beside its
// wall time (the cgroup core accounts usage_usec with no controller
// enabled: a hybrid host's /sys/fs/cgroup/unified serves).
type cpuGroup struct {
	dir    string
	fd     int
	closed bool
}

var cpuGroupSeq atomic.Int64

// cgroup2Root is the mount point of the cgroup v2 hierarchy.
func cgroup2Root() (string, error) {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return d, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified")
}

func newCPUGroup(t *testing.T) *cpuGroup {
	t.Helper()
	root, err := cgroup2Root()
	if err != nil {
		t.Fatalf("CPU per start is read from a cgroup v2 cpu.stat: %v (fix: mount -t cgroup2 none /sys/fs/cgroup/unified)", err)
	}
	dir := filepath.Join(root, fmt.Sprintf("lazaret-bench-%d-%d", os.Getpid(), cpuGroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("CPU accounting cgroup: %v", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		t.Fatalf("CPU accounting cgroup: %v", err)
	}
	g := &cpuGroup{dir: dir, fd: fd}
	// A bench that fails mid-run still removes the group once its
	// processes are gone.
	t.Cleanup(func() { g.remove() })
	return g
}

// in makes c start inside the group (clone3 CLONE_INTO_CGROUP), before it
// runs anything; a nil group leaves c where the bench runs.
func (g *cpuGroup) in(c *exec.Cmd) *exec.Cmd {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	if g != nil {
		c.SysProcAttr.UseCgroupFD, c.SysProcAttr.CgroupFD = true, g.fd
	}
	return c
}

// usageMS is the CPU time, user and system, of every process that ran in
// the group so far, in milliseconds.
func (g *cpuGroup) usageMS(t *testing.T) float64 {
	t.Helper()
	f, err := os.Open(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		t.Fatalf("CPU accounting: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("CPU accounting: %s: %q", g.dir, sc.Text())
			}
			return float64(us) / 1000
		}
	}
	t.Fatalf("CPU accounting: no usage_usec in %s/cpu.stat", g.dir)
	return 0
}

// close removes the group once its processes are gone (the caller waited
// for the product's teardown).
func (g *cpuGroup) close(t *testing.T) {
	t.Helper()
	if !g.remove() {
		procs, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		t.Errorf("CPU accounting cgroup %s still holds processes: %s", g.dir, procs)
	}
}

// remove closes the group's descriptor and removes its directory, waiting
// up to 10 s for its processes to end; false if they did not.
func (g *cpuGroup) remove() bool {
	if !g.closed {
		g.closed = true
		unix.Close(g.fd)
	}
	return waitUntil(10*time.Second, 50*time.Millisecond, func() bool {
		err := os.Remove(g.dir)
		return err == nil || errors.Is(err, os.ErrNotExist)
	})
}

// asUserIn is asUser with the command started in g (when not nil).
func asUserIn(t *testing.T, e *env, g *cpuGroup, dir string, argv ...string) time.Duration {
	t.Helper()
	c := g.in(exec.Command(argv[0], argv[1:]...))
	c.Dir = dir
	c.Env = userEnv(e)
	c.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}
	start := time.Now()
	out, err := c.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	return d
}
