package prepared

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTreeSteps: the file-system steps package preparedcatalog takes around
// its catalog records — probing a tree, gc's exclusive lock, the move into
// the trash, a staging tree's quarantine and its deletion.
func TestTreeSteps(t *testing.T) {
	root := t.TempDir()
	id := idPrefix + strings.Repeat("0123456789abcdef", 2)
	other := idPrefix + strings.Repeat("fedcba9876543210", 2)
	for _, d := range []string{filepath.Join(preparedDir, id, "rootfs"), filepath.Join(preparedDir, stagingDir, "s1", "rootfs"), filepath.Join(preparedDir, usedDir)} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	st, err := OpenStore(root, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	probe := func(want Presence, id string) {
		t.Helper()
		if p, err := st.Probe(id); p != want || err != nil {
			t.Fatalf("Probe(%s) = %v, %v; want %v", id, p, err, want)
		}
		if p, err := ProbeIn(root, id); p != want || err != nil {
			t.Fatalf("ProbeIn(%s) = %v, %v; want %v", id, p, err, want)
		}
	}
	probe(TreeIdle, id)
	probe(TreeAbsent, other)
	if p, err := ProbeIn(t.TempDir(), id); p != TreeAbsent || err != nil {
		t.Fatalf("ProbeIn of a Storage Root without prepared/ = %v, %v", p, err)
	}
	if _, err := ProbeIn(root, "../x"); err == nil {
		t.Fatal("ProbeIn accepted an invalid ID")
	}
	if names, err := st.ArtifactNames(); err != nil || !slices.Equal(names, []string{id}) {
		t.Fatalf("ArtifactNames = %v, %v; want only %s", names, err, id)
	}
	if names, err := st.StagingNames(); err != nil || !slices.Equal(names, []string{"s1"}) {
		t.Fatalf("StagingNames = %v, %v", names, err)
	}

	l, inUse, err := st.LockExclusive(id)
	if err != nil || inUse {
		t.Fatalf("LockExclusive = %v, %v", inUse, err)
	}
	probe(TreeExclusive, id)
	if _, inUse, err := st.LockExclusive(id); !inUse || err != nil {
		t.Fatalf("a second LockExclusive = in use %v, %v; want in use", inUse, err)
	}
	if _, _, err := st.LockExclusive(other); err == nil {
		t.Fatal("LockExclusive of a missing tree succeeded")
	}
	if moved, err := st.MoveToTrash(id, id+".1"); !moved || err != nil {
		t.Fatalf("MoveToTrash = %v, %v", moved, err)
	}
	l.Release()
	probe(TreeAbsent, id)
	if moved, err := st.MoveToTrash(id, id+".2"); moved || err == nil || !strings.Contains(err.Error(), "reclaim "+id) {
		t.Fatalf("MoveToTrash of a moved tree: moved %v, %v", moved, err)
	}
	if n, err := st.TrashCount(); n != 1 || err != nil {
		t.Fatalf("TrashCount = %d, %v; want 1", n, err)
	}

	q, err := st.QuarantineStaging("s1")
	if err != nil || q != QuarantineName("s1") || !isQuarantine(q) {
		t.Fatalf("QuarantineStaging = %q, %v", q, err)
	}
	if _, err := os.Stat(filepath.Join(root, preparedDir, trashDir, q, "rootfs")); err != nil {
		t.Fatalf("the quarantined tree: %v", err)
	}
	if q, err := st.QuarantineStaging("s1"); q != "" || err != nil {
		t.Fatalf("QuarantineStaging of a missing tree = %q, %v; want none", q, err)
	}
	if err := st.RemoveQuarantined(q); err != nil {
		t.Fatal(err)
	}
	if n, err := st.TrashCount(); n != 1 || err != nil {
		t.Fatalf("TrashCount after the deletion = %d, %v; want the reclaimed tree only", n, err)
	}
}
