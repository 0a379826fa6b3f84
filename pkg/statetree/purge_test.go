package statetree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// cancelAfter is a context whose Err reports context.Canceled from its
// n+1st call on.
type cancelAfter struct {
	context.Context
	n atomic.Int64
}

func (c *cancelAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// TestPurgeContextCancelled: a purge cancelled inside an entry returns the
// context's error, leaves that entry (part deleted) and the others; Purge
// then finishes all of them.
func TestPurgeContextCancelled(t *testing.T) {
	trash := t.TempDir()
	for e := range 3 {
		dir := filepath.Join(trash, "e"+strconv.Itoa(e), "d")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 5 {
			if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(f)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(dir, 0); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(trash, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ctx := &cancelAfter{Context: context.Background()}
	ctx.n.Store(4) // the entry, d, two files of d
	n, err := PurgeContext(ctx, fd)
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("cancelled purge: %d %v, want 0 and context.Canceled", n, err)
	}
	names, err := ReadNames(fd)
	if err != nil || len(names) != 3 {
		t.Fatalf("trash after the cancelled purge: %v %v", names, err)
	}
	left := 0
	for _, name := range names {
		d := filepath.Join(trash, name, "d")
		os.Chmod(d, 0o700)
		ents, _ := os.ReadDir(d)
		left += len(ents)
	}
	if left != 13 {
		t.Fatalf("%d files left after deleting two, want 13", left)
	}
	if n, err := Purge(fd); err != nil || n != 3 {
		t.Fatalf("second purge: %d %v", n, err)
	}
	if names, _ := ReadNames(fd); len(names) != 0 {
		t.Fatalf("trash left: %v", names)
	}
}
