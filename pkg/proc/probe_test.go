package proc

import (
	"context"
	"fmt"
	"os"
	"testing"
)

func TestPidfsHostSupportProbe(t *testing.T) {
	b := testBroker(t)
	rep, err := b.PidfsHostSupportProbe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Version != ProbeVersion || len(rep.Observations) != 5 {
		t.Fatalf("report %+v", rep)
	}
}

// TestKernelQualificationSuite is the qualification suite a kernel build
// must pass before its line is added to pkg/hostcheck/qualified-kernels.txt:
// the probe repeated, and a run of consecutive processes whose pidfs inodes
// must be strictly increasing and distinct (the boot-monotonic allocation
// the spec relies on). It runs with the unit tests too, so a kernel that
// regresses is noticed; `make qualify-kernel` prints the line to register.
func TestKernelQualificationSuite(t *testing.T) {
	b := testBroker(t)
	for i := 0; i < 20; i++ {
		if _, err := b.PidfsHostSupportProbe(context.Background()); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	var last uint64
	seen := map[uint64]bool{}
	const n = 500
	for i := 0; i < n; i++ {
		c, err := b.probeSpawn()
		if err != nil {
			t.Fatal(err)
		}
		id := c.c.Identity()
		c.end(context.Background())
		if id.Ino <= last || seen[id.Ino] {
			t.Fatalf("pidfs inode %d after %d (process %d): not strictly increasing", id.Ino, last, i)
		}
		seen[id.Ino] = true
		last = id.Ino
	}
	fmt.Fprintf(os.Stdout, "qualification: 20 probes passed; %d consecutive processes with strictly increasing pidfs inodes (last %d)\n", n, last)
}
