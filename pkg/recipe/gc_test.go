package recipe

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func mkImage(t *testing.T, dir, name string, used time.Time) {
	t.Helper()
	layout := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(layout, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout, "blobs", "sha256", "x"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout, "index.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MarkUsed(layout, used); err != nil {
		t.Fatal(err)
	}
}

func TestGCReclaimsOnlyUnusedRecipeImages(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	old := now.Add(-72 * time.Hour)
	mkImage(t, dir, "recipe-wanted", old)
	mkImage(t, dir, "recipe-stale", old)
	mkImage(t, dir, "recipe-recent", now.Add(-time.Hour))
	mkImage(t, dir, "recipe-building", old)
	mkImage(t, dir, "debian", old)
	if err := os.MkdirAll(filepath.Join(dir, ".trash-recipe-crashed", "blobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := Lock(t.Context(), filepath.Join(dir, "recipe-building"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	policy := GCPolicy{Wanted: map[string]string{"recipe-wanted": "claude"}, MinAge: 24 * time.Hour}

	dry, err := GC(dir, policy, true, now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"recipe-building": "keep", "recipe-recent": "keep", "recipe-stale": "reclaim", "recipe-wanted": "keep"}
	if len(dry) != len(want) {
		t.Fatalf("dry run entries %+v, want %v", dry, want)
	}
	for _, e := range dry {
		if want[e.Name] != e.Action {
			t.Errorf("dry run: %s: %s (%s), want %s", e.Name, e.Action, e.Reason, want[e.Name])
		}
		if e.Bytes < 4096 {
			t.Errorf("%s: %d bytes, want ≥ 4096", e.Name, e.Bytes)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "recipe-stale")); err != nil {
		t.Fatalf("the dry run removed recipe-stale: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".trash-recipe-crashed")); err != nil {
		t.Fatalf("the dry run removed a leftover: %v", err)
	}

	got, err := GC(dir, policy, false, now)
	if err != nil {
		t.Fatal(err)
	}
	want["recipe-stale"] = "reclaimed"
	for _, e := range got {
		if want[e.Name] != e.Action {
			t.Errorf("%s: %s (%s), want %s", e.Name, e.Action, e.Reason, want[e.Name])
		}
	}
	for name, gone := range map[string]bool{"recipe-stale": true, ".trash-recipe-crashed": true, ".trash-recipe-stale": true,
		"recipe-wanted": false, "recipe-recent": false, "recipe-building": false, "debian": false} {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone != os.IsNotExist(err) {
			t.Errorf("%s: gone=%v, want gone=%v (%v)", name, os.IsNotExist(err), gone, err)
		}
	}
}
