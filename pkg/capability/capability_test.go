package capability

import (
	"os"
	"os/exec"
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
