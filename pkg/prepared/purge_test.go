package prepared

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

// cancelAfter is a context whose Err reports context.Canceled from its
// n+1st call on: a cancellation at a chosen point of a deletion.
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

// fillTrash puts entries reclaimed trees of width files in each of width
// directories into storageRoot's prepared trash, plus a foreign entry.
func fillTrash(t *testing.T, storageRoot string, entries, width int) string {
	t.Helper()
	trash := filepath.Join(storageRoot, preparedDir, trashDir)
	if err := os.MkdirAll(filepath.Join(storageRoot, preparedDir, stagingDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for e := range entries {
		for d := range width {
			dir := filepath.Join(trash, idPrefix+strconv.Itoa(e), "rootfs", "d"+strconv.Itoa(d))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for f := range width {
				if err := os.WriteFile(filepath.Join(dir, "f"+strconv.Itoa(f)), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := os.Mkdir(filepath.Join(trash, "someone-elses"), 0o755); err != nil {
		t.Fatal(err)
	}
	return trash
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, _ os.DirEntry, err error) error {
		n++
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPurgeTrashCancelled: a purge cancelled midway returns the context's
// error having deleted part of the trash (a partly deleted entry included)
// and nothing else; a second purge finishes every reclaimed tree, partly
// deleted or untouched, and leaves the foreign entry.
func TestPurgeTrashCancelled(t *testing.T) {
	root := t.TempDir()
	trash := fillTrash(t, root, 3, 4)
	before := countFiles(t, trash)
	// The first entry holds 1+1+4*(1+4) = 22 inodes: stop inside it.
	ctx := &cancelAfter{Context: context.Background()}
	ctx.n.Store(10)
	n, err := PurgeTrash(ctx, root)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled purge: %d %v, want context.Canceled", n, err)
	}
	if n != 0 {
		t.Errorf("cancelled inside the first entry, reported %d deleted", n)
	}
	after := countFiles(t, trash)
	if after >= before || after <= before-10 {
		t.Errorf("cancelled purge: %d of %d inodes left, want some deleted, at most 9", after, before)
	}
	for e := range 3 {
		if _, err := os.Stat(filepath.Join(trash, idPrefix+strconv.Itoa(e))); err != nil {
			t.Errorf("entry %d gone or unreadable after a cancelled purge: %v", e, err)
		}
	}
	// An already-cancelled context deletes nothing.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := PurgeTrash(done, root); !errors.Is(err, context.Canceled) || countFiles(t, trash) != after {
		t.Fatalf("purge with a done context: %v, %d inodes left of %d", err, countFiles(t, trash), after)
	}
	n, err = PurgeTrash(context.Background(), root)
	if err != nil || n != 3 {
		t.Fatalf("second purge: %d %v, want 3 deleted", n, err)
	}
	ents, err := os.ReadDir(trash)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "someone-elses" {
		t.Fatalf("trash after the second purge: %v, want only the foreign entry", ents)
	}
}

// TestPurgeTrashCancelledLater: a cancellation between entries keeps the
// entries deleted so far deleted and reports them.
func TestPurgeTrashCancelledLater(t *testing.T) {
	root := t.TempDir()
	trash := fillTrash(t, root, 3, 2)
	// Each entry holds 1+1+2*(1+2) = 8 inodes: stop inside the second.
	ctx := &cancelAfter{Context: context.Background()}
	ctx.n.Store(11)
	n, err := PurgeTrash(ctx, root)
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("cancelled purge: %d %v, want 1 deleted and context.Canceled", n, err)
	}
	ents, _ := os.ReadDir(trash)
	if len(ents) != 3 { // two reclaimed trees and the foreign entry
		t.Fatalf("trash after the cancelled purge: %v", ents)
	}
	if n, err := PurgeTrash(context.Background(), root); err != nil || n != 2 {
		t.Fatalf("second purge: %d %v, want 2", n, err)
	}
}
