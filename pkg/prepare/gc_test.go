package prepare

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
)

// TestGCRespectsHolds (OR-7): an artifact held by a user (Hold) is never
// reclaimed; an unheld one is, by one rename into prepared/.trash, under
// the policy; a foreign entry and the staging directory are kept; a hold on
// a reclaimed artifact reports prepared.ErrGone; PurgeTrash deletes the trash.
func TestGCRespectsHolds(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	a, err := Ensure(context.Background(), Options{StorageRoot: root, ImageRef: busyboxRef(t), DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(root, "prepared", "someone-elses")
	os.Mkdir(foreign, 0o755)
	use, err := prepared.Hold(root, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	res, err := preparedcatalog.GC(root, preparedcatalog.GCPolicy{}, false, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Entries {
		if e.Action != "keep" {
			t.Errorf("held or foreign entry reclaimed: %+v", e)
		}
	}
	use.Release()
	// Policy: kept while among the Keep most recent or younger than MinAge.
	for _, p := range []preparedcatalog.GCPolicy{{Keep: 1}, {MinAge: time.Hour}} {
		res, _ := preparedcatalog.GC(root, p, false, now)
		for _, e := range res.Entries {
			if e.Action != "keep" {
				t.Errorf("policy %+v reclaimed %+v", p, e)
			}
		}
	}
	res, err = preparedcatalog.GC(root, preparedcatalog.GCPolicy{}, true, now)
	if err != nil || res.TrashEntries != 0 {
		t.Fatalf("dry run: %+v %v", res, err)
	}
	if _, err := os.Stat(a.Dir); err != nil {
		t.Fatal("dry run reclaimed")
	}
	res, err = preparedcatalog.GC(root, preparedcatalog.GCPolicy{}, false, now)
	if err != nil || res.TrashEntries != 1 {
		t.Fatalf("gc: %+v %v", res, err)
	}
	if _, err := os.Stat(a.Dir); !os.IsNotExist(err) {
		t.Fatal("artifact still published")
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatal("foreign entry touched")
	}
	if _, err := prepared.Hold(root, a.ID); !errors.Is(err, prepared.ErrGone) {
		t.Fatalf("hold of a reclaimed artifact: %v", err)
	}
	if n, err := prepared.PurgeTrash(context.Background(), root); n != 1 || err != nil {
		t.Fatalf("purge %d %v", n, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "prepared", trashDir)); len(ents) != 0 {
		t.Fatalf("trash left: %v", ents)
	}
	// Size budget: over it, even a recent artifact is reclaimed.
	a, err = Ensure(context.Background(), Options{StorageRoot: root, ImageRef: busyboxRef(t), DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, _ = preparedcatalog.GC(root, preparedcatalog.GCPolicy{Keep: 5, MinAge: time.Hour, MaxBytes: 1}, false, time.Now())
	if res.TrashEntries != 1 {
		t.Fatalf("size budget: %+v", res)
	}
}
