package capability

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDropAllInChild drops everything in a child (this test binary
// re-executed, with several runtime threads) and checks every thread there
// through /proc: no capability in any set, no_new_privs everywhere.
func TestDropAllInChild(t *testing.T) {
	if os.Getenv("CAPABILITY_TEST_CHILD") == "1" {
		done := make(chan struct{})
		for i := 0; i < 4; i++ { // more threads
			go func() { <-done }()
		}
		if err := DropAll(); err != nil {
			t.Fatal(err)
		}
		held, nnp, err := Held(os.Getpid())
		close(done)
		if err != nil || len(held) != 0 || !nnp {
			t.Fatalf("after DropAll: held %v, no_new_privs %v, %v", held, nnp, err)
		}
		return
	}
	c := exec.Command(os.Args[0], "-test.run=^TestDropAllInChild$", "-test.v")
	c.Env = append(os.Environ(), "CAPABILITY_TEST_CHILD=1")
	out, err := c.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestBoundThenKeepInChild bounds a child (this test binary re-executed)
// to one capability while it keeps its others in use, as the Git-routing
// daemon does before its mount; threads the runtime creates afterwards
// inherit the bound, so Keep, which skips what the calling thread's
// bounding set already lacks, still leaves no thread anything beyond it.
func TestBoundThenKeepInChild(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (CI runs the unit tests as root): it bounds capabilities a non-root process does not hold")
		}
		t.Skip("needs root: bounds capabilities a non-root process does not hold")
	}
	if os.Getenv("CAPABILITY_TEST_CHILD") == "bound" {
		keep := Of(unix.CAP_CHOWN)
		if err := Bound(keep); err != nil {
			t.Fatal(err)
		}
		if held, err := ThreadsHold(os.Getpid(), unix.CAP_SYS_ADMIN); err != nil || !held {
			t.Fatalf("Bound took CAP_SYS_ADMIN out of the effective set (%v)", err)
		}
		bnd := func() []string {
			all, _, err := Held(os.Getpid())
			if err != nil {
				t.Fatal(err)
			}
			var beyond []string
			for _, h := range all {
				if _, mask, _ := strings.Cut(h, " CapBnd="); mask != "" {
					if v, err := strconv.ParseUint(mask, 16, 64); err != nil || Mask(v)&^keep != 0 {
						beyond = append(beyond, h)
					}
				}
			}
			return beyond
		}
		if b := bnd(); len(b) != 0 {
			t.Fatalf("after Bound, bounding sets beyond the kept one: %v", b)
		}
		// New threads: each goroutine locked to its own.
		done := make(chan struct{})
		started := make(chan struct{})
		for i := 0; i < 4; i++ {
			go func() {
				runtime.LockOSThread()
				started <- struct{}{}
				<-done
			}()
			<-started
		}
		if b := bnd(); len(b) != 0 {
			t.Fatalf("threads made after Bound hold a wider bounding set: %v", b)
		}
		if err := Keep(keep); err != nil {
			t.Fatal(err)
		}
		held, nnp, err := Beyond(os.Getpid(), keep)
		close(done)
		if err != nil || len(held) != 0 || !nnp {
			t.Fatalf("after Keep: beyond the kept set %v, no_new_privs %v, %v", held, nnp, err)
		}
		return
	}
	c := exec.Command(os.Args[0], "-test.run=^TestBoundThenKeepInChild$", "-test.v")
	c.Env = append(os.Environ(), "CAPABILITY_TEST_CHILD=bound")
	out, err := c.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestDropOneInChild drops CAP_NET_ADMIN alone in a child: no thread holds
// it afterwards, and (as root) CAP_SYS_ADMIN is kept.
func TestDropOneInChild(t *testing.T) {
	if os.Getenv("CAPABILITY_TEST_CHILD") == "one" {
		if err := Drop(unix.CAP_NET_ADMIN); err != nil {
			t.Fatal(err)
		}
		if held, err := ThreadsHold(os.Getpid(), unix.CAP_NET_ADMIN); err != nil || held {
			t.Fatalf("CAP_NET_ADMIN still held (%v)", err)
		}
		if held, _ := ThreadsHold(os.Getpid(), unix.CAP_SYS_ADMIN); os.Geteuid() == 0 && !held {
			t.Fatal("CAP_SYS_ADMIN was dropped too")
		}
		return
	}
	c := exec.Command(os.Args[0], "-test.run=^TestDropOneInChild$", "-test.v")
	c.Env = append(os.Environ(), "CAPABILITY_TEST_CHILD=one")
	out, err := c.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func TestHeldReadsThisProcess(t *testing.T) {
	held, _, err := Held(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && len(held) == 0 {
		t.Fatalf("root test process reports no capabilities")
	}
}

// TestLast reads the kernel's last capability: CAP_CHECKPOINT_RESTORE (40)
// or later on the kernels Lazaret supports.
func TestLast(t *testing.T) {
	if last, err := Last(); err != nil || last < unix.CAP_CHECKPOINT_RESTORE {
		t.Fatalf("last capability %d %v", last, err)
	}
}
