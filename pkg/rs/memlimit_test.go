package rs

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

// The watchdog's reading: a memfd named like the sentry's memory file, in
// this process, counted by committed pages, not by size.
func TestSandboxMemoryCountsCommittedPages(t *testing.T) {
	h, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := openSandboxMemory(h); err == nil || !strings.Contains(err.Error(), "memfd:runsc-memory") {
		t.Fatalf("no memory file: err %v, want it named", err)
	}
	fd, err := unix.MemfdCreate("runsc-memory", 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "runsc-memory")
	defer f.Close()
	if err := f.Truncate(1 << 30); err != nil { // sparse, like a fresh chunk
		t.Fatal(err)
	}
	m, err := openSandboxMemory(h)
	if err != nil {
		t.Fatal(err)
	}
	before, err := m.committed()
	if err != nil {
		t.Fatal(err)
	}
	if before > 1<<20 {
		t.Fatalf("a sparse 1 GiB memory file counts %d bytes", before)
	}
	if _, err := f.WriteAt(make([]byte, 8<<20), 0); err != nil {
		t.Fatal(err)
	}
	after, err := m.committed()
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 8<<20 || after > before+9<<20 {
		t.Fatalf("8 MiB written: committed %d → %d", before, after)
	}
	// Punching pages out (what the sentry does with freed memory) gives
	// them back.
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 8<<20); err != nil {
		t.Fatal(err)
	}
	if again, _ := m.committed(); again > before+(1<<20) {
		t.Fatalf("punched pages still counted: %d", again)
	}
}

func TestMemoryExceededMessageNamesTheKey(t *testing.T) {
	msg := memoryExceeded{used: 1<<30 + 4096, limit: 1 << 30}.Error()
	for _, want := range []string{"committed 1025 MiB", "limit of 1024 MiB", "limits.memory", "Raise"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}
