package capability

import (
	"os"
	"os/exec"
	"strings"
	"testing"
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

func TestHeldReadsThisProcess(t *testing.T) {
	held, _, err := Held(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && len(held) == 0 {
		t.Fatalf("root test process reports no capabilities")
	}
}
