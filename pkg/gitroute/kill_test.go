package gitroute

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// daemonEnv makes the test binary run the daemon's Main instead of tests.
const daemonEnv = "LAZARET_GITROUTE_DAEMON"

// TestDaemonKilledWhileMountingIsReaped SIGKILLs the daemon the moment its
// mount appears, again and again. A daemon that touches its own mount (an
// open file or a request in flight on it, as go-fuse's WaitMount poll probe
// does) cannot exit once killed: closing that file waits for a reply only
// the dead daemon could give, and the process stays in D state for good.
// Every killed daemon must be reaped promptly.
func TestDaemonKilledWhileMountingIsReaped(t *testing.T) {
	if a := os.Getenv(daemonEnv); a != "" {
		// The daemon's mount and serve loop (Main also drops
		// capabilities, which needs a cgo-free binary).
		p := strings.Split(a, "\n")
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		srv, _, err := Mount(p[0], p[1], p[2], "", nil, nil, Guard{}, Ownership{}, false, log)
		if err != nil {
			log.Error("mount", "err", err)
			os.Exit(1)
		}
		srv.Wait()
		os.Exit(0)
	}
	if os.Getenv(helperEnv) == "" {
		root := t.TempDir()
		c := exec.Command("unshare", "-Urm", os.Args[0], "-test.run=^TestDaemonKilledWhileMountingIsReaped$", "-test.v", "-test.short="+strconv.FormatBool(testing.Short()))
		c.Env = append(os.Environ(), helperEnv+"="+root)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		err := c.Wait()
		// A stuck daemon is freed by aborting only its own FUSE connection
		// (the helper printed it), so nothing is left behind.
		sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
		for sc.Scan() {
			if conn, ok := strings.CutPrefix(sc.Text(), "stuck-fuse-connection "); ok {
				if _, err := strconv.Atoi(conn); err == nil {
					os.WriteFile(filepath.Join("/sys/fs/fuse/connections", conn, "abort"), []byte("1"), 0)
				}
			}
		}
		if err != nil {
			t.Fatalf("kill scenario in a user+mount namespace: %v\n%s", err, out.String())
		}
		return
	}
	root := os.Getenv(helperEnv)
	ws, mnt := filepath.Join(root, "ws"), filepath.Join(root, "mnt")
	for _, d := range []string{ws, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(ws, "file"), "x\n")
	args := []string{ws, filepath.Join(root, "state"), mnt}
	// make check (-short, passed on to this helper) kills in fewer
	// rounds, one per spin below; make unit and CI run all of them.
	rounds := 40
	if testing.Short() && os.Getenv("CI") == "" {
		rounds = 10
	}
	for i := 0; i < rounds; i++ {
		c := exec.Command(os.Args[0], "-test.run=^TestDaemonKilledWhileMountingIsReaped$")
		c.Env = append(os.Environ(), daemonEnv+"="+strings.Join(args, "\n"))
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		dev, err := waitMounted(mnt, 10*time.Second)
		if err != nil {
			c.Process.Kill()
			c.Wait()
			t.Fatalf("round %d: %v\n%s", i, err, stderr.String())
		}
		// Spread the kills over the first moments after mount(2).
		spin := time.Duration(i%10) * 50 * time.Microsecond
		for start := time.Now(); time.Since(start) < spin; {
		}
		c.Process.Signal(syscall.SIGKILL)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			state, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
			stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stack", c.Process.Pid))
			fmt.Printf("stuck-fuse-connection %d\n", unix.Minor(dev))
			t.Fatalf("round %d: daemon %d killed 10 s ago is not reaped: %s\n%s", i, c.Process.Pid, state, stack)
		}
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Fatalf("round %d: unmount: %v (daemon: %v)\n%s", i, err, c.ProcessState, stderr.String())
		}
	}
}

// waitMounted polls the mount table until mnt is a mount point and returns
// its device, without touching the filesystem mounted there.
func waitMounted(mnt string, limit time.Duration) (uint64, error) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return 0, err
		}
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) > 4 && f[4] == mnt {
				maj, min, _ := strings.Cut(f[2], ":")
				a, _ := strconv.Atoi(maj)
				b, _ := strconv.Atoi(min)
				return unix.Mkdev(uint32(a), uint32(b)), nil
			}
		}
	}
	return 0, fmt.Errorf("%s not mounted within %s", mnt, limit)
}
