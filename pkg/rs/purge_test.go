package rs

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/prepared"
)

// syncBuffer is a bytes.Buffer safe for the purge goroutine's log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestAwaitPurgeStopsDeletion: RS's exit does not wait for the background
// deletion of reclaimed trees: awaitPurge cancels it and returns within
// purgeStopBound, logging that the next start continues; what is left
// stays in the trash and the next purge finishes it.
func TestAwaitPurgeStopsDeletion(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "prepared", ".staging"), 0o700); err != nil {
		t.Fatal(err)
	}
	const entries, files = 4, 4000
	for e := range entries {
		dir := filepath.Join(root, "prepared", ".trash", "pl-"+strconv.Itoa(e)+".1", "rootfs")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range files {
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(f)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var logs syncBuffer
	s := &supervisor{log: slog.New(slog.NewTextHandler(&logs, nil))}
	s.startPurge(root)
	start := time.Now()
	s.awaitPurge()
	if d := time.Since(start); d >= purgeStopBound {
		t.Fatalf("awaitPurge took %v (bound %v)", d, purgeStopBound)
	}
	select {
	case <-s.purged:
	default:
		t.Fatal("awaitPurge returned before the deletion stopped")
	}
	if !strings.Contains(logs.String(), "stopped at exit; the next start continues") {
		t.Errorf("log: %s", logs.String())
	}
	left, err := os.ReadDir(filepath.Join(root, "prepared", ".trash"))
	if err != nil || len(left) == 0 {
		t.Fatalf("trash after a stopped deletion: %v %v (want entries left)", left, err)
	}
	if n, err := prepared.PurgeTrash(context.Background(), root); err != nil || n != len(left) {
		t.Fatalf("next purge: %d %v, want %d", n, err, len(left))
	}
	if left, _ := os.ReadDir(filepath.Join(root, "prepared", ".trash")); len(left) != 0 {
		t.Fatalf("trash after the next purge: %v", left)
	}
}
