package removal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// storageRoot builds a Storage Root with one Domain Root (lock, store
// files, a private read-only subtree as an upper has) and returns it with
// the Domain's ID.
func storageRoot(t *testing.T) (string, domain.ID) {
	t.Helper()
	base := t.TempDir()
	t.Cleanup(func() { openUpAll(base) })
	sr := filepath.Join(base, "lazaret")
	id := domain.DeriveID("tiny", "/w")
	dr := filepath.Join(sr, DomainsDir, string(id))
	for _, d := range []string{"anchors/root/upper/priv/deep", "ignored-state/node_modules", "store"} {
		if err := os.MkdirAll(filepath.Join(dr, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{lockName, "domain.json", "anchors/root/upper/priv/deep/f", "store/000001.log"} {
		if err := os.WriteFile(filepath.Join(dr, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Directories the deletion must open up first.
	os.Chmod(filepath.Join(dr, "anchors/root/upper/priv/deep"), 0)
	os.Chmod(filepath.Join(dr, "anchors/root/upper/priv"), 0o500)
	os.MkdirAll(filepath.Join(sr, "prepared", "pl-0123"), 0o755)
	os.WriteFile(filepath.Join(sr, "storage-catalog.lock"), nil, 0o600)
	return sr, id
}

// openUpAll makes every directory beneath dir accessible again, so that
// the test's temporary directory can be removed (as a non-root user).
func openUpAll(dir string) {
	filepath.Walk(dir, func(p string, fi os.FileInfo, _ error) error {
		if fi != nil && fi.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}

func open(t *testing.T, dir string) *Root {
	t.Helper()
	r, found, err := Open(dir, os.Getuid())
	if err != nil || !found {
		t.Fatalf("open %s: %v %v", dir, found, err)
	}
	t.Cleanup(r.Close)
	return r
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// TestMoveDomainThenPurge: the Domain Root leaves domains/ with one rename
// into the trash (the lock held stays valid), the purge deletes it whole,
// read-only and mode-0 directories included.
func TestMoveDomainThenPurge(t *testing.T) {
	sr, id := storageRoot(t)
	lock, err := os.OpenFile(filepath.Join(sr, DomainsDir, string(id), lockName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	r := open(t, sr)
	name, moved, err := r.MoveDomain(id, lock, time.Unix(0, 42))
	if err != nil || !moved || name != "domain-"+string(id)+".42" {
		t.Fatalf("move: %q %v %v", name, moved, err)
	}
	if got := names(t, filepath.Join(sr, DomainsDir)); len(got) != 0 {
		t.Fatalf("domains/ still holds %v", got)
	}
	if n, err := r.TrashEntries(); err != nil || n != 1 {
		t.Fatalf("trash entries %d %v", n, err)
	}
	// Moving again: no such Domain.
	if _, moved, err := r.MoveDomain(id, nil, time.Now()); err != nil || moved {
		t.Fatalf("second move: %v %v", moved, err)
	}
	n, err := PurgeTrash(context.Background(), sr, os.Getuid())
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if got := names(t, filepath.Join(sr, TrashDir)); len(got) != 0 {
		t.Fatalf("trash still holds %v", got)
	}
	if n, err := PurgeTrash(context.Background(), sr, os.Getuid()); err != nil || n != 0 {
		t.Fatalf("purge of an empty trash: %d %v", n, err)
	}
}

// TestMoveDomainRefusesAnotherRoot: a Domain Root whose lock is not the
// one held (replaced after it was locked) is not moved.
func TestMoveDomainRefusesAnotherRoot(t *testing.T) {
	sr, id := storageRoot(t)
	other, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	r := open(t, sr)
	if _, _, err := r.MoveDomain(id, other, time.Now()); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("foreign lock: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sr, DomainsDir, string(id), "domain.json")); err != nil {
		t.Fatalf("Domain Root moved anyway: %v", err)
	}
	if _, _, err := r.MoveDomain("../../etc", nil, time.Now()); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
}

// TestSymlinksNeverFollowed: a symlinked Storage Root, domains/ or Domain
// Root is refused, and a symlink inside the trash is deleted, not
// followed.
func TestSymlinksNeverFollowed(t *testing.T) {
	sr, id := storageRoot(t)
	outside := t.TempDir()
	t.Cleanup(func() { openUpAll(outside) })
	os.WriteFile(filepath.Join(outside, "precious"), []byte("keep"), 0o600)

	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(sr, link)
	if _, _, err := Open(link, os.Getuid()); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("symlinked Storage Root: %v", err)
	}
	if _, _, err := Open(sr, os.Getuid()+1); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("foreign owner: %v", err)
	}
	if r, found, err := Open(filepath.Join(sr, "missing"), os.Getuid()); r != nil || found || err != nil {
		t.Errorf("missing: %v %v", found, err)
	}

	r := open(t, sr)
	other := domain.DeriveID("tiny", "/other")
	os.Symlink(outside, filepath.Join(sr, DomainsDir, string(other)))
	if _, _, err := r.MoveDomain(other, nil, time.Now()); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("symlinked Domain Root: %v", err)
	}

	// A symlink to the outside planted in a tree that is then removed.
	os.Symlink(outside, filepath.Join(sr, DomainsDir, string(id), "ignored-state", "node_modules", "escape"))
	if _, _, err := r.MoveDomain(id, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Purge(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(b) != "keep" {
		t.Fatalf("the purge followed a symlink out: %q %v", b, err)
	}

	// domains/ itself a symlink.
	sr2, id2 := storageRoot(t)
	os.Rename(filepath.Join(sr2, DomainsDir), filepath.Join(outside, "domains"))
	os.Symlink(filepath.Join(outside, "domains"), filepath.Join(sr2, DomainsDir))
	if _, _, err := open(t, sr2).MoveDomain(id2, nil, time.Now()); !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("symlinked domains/: %v", err)
	}
}

// TestMoveEverythingThenRemoveRoot: every entry but the trash moves, the
// purge empties the trash and the Storage Root itself goes.
func TestMoveEverythingThenRemoveRoot(t *testing.T) {
	sr, _ := storageRoot(t)
	r := open(t, sr)
	entries, err := r.Entries()
	if err != nil || strings.Join(entries, " ") != "domains prepared storage-catalog.lock" {
		t.Fatalf("entries %v %v", entries, err)
	}
	for _, n := range entries {
		if _, moved, err := r.MoveEntry(n, time.Now()); err != nil || !moved {
			t.Fatalf("move %s: %v %v", n, moved, err)
		}
	}
	if _, moved, err := r.MoveEntry("prepared", time.Now()); err != nil || moved {
		t.Fatalf("move of a moved entry: %v %v", moved, err)
	}
	for _, bad := range []string{"", ".", "..", TrashDir, "a/b"} {
		if _, _, err := r.MoveEntry(bad, time.Now()); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("move %q: %v", bad, err)
		}
	}
	if got := names(t, sr); strings.Join(got, " ") != TrashDir {
		t.Fatalf("left in the Storage Root: %v", got)
	}
	if n, err := r.Purge(); err != nil || n != 3 {
		t.Fatalf("purge %d %v", n, err)
	}
	if gone, err := r.RemoveIfEmpty(); err != nil || !gone {
		t.Fatalf("remove root: %v %v", gone, err)
	}
	if _, err := os.Lstat(sr); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Storage Root still there: %v", err)
	}
}

// TestRemoveIfEmptyKeepsNewState: something created after the moves (a new
// lazaret run) keeps the Storage Root.
func TestRemoveIfEmptyKeepsNewState(t *testing.T) {
	sr, _ := storageRoot(t)
	r := open(t, sr)
	if _, _, err := r.MoveEntry("prepared", time.Now()); err != nil {
		t.Fatal(err)
	}
	if gone, err := r.RemoveIfEmpty(); err != nil || gone {
		t.Fatalf("non-empty root removed: %v %v", gone, err)
	}
	if got := names(t, sr); strings.Join(got, " ") != ".trash domains storage-catalog.lock" {
		t.Fatalf("root now holds %v", got)
	}
}

// TestRemoveImages: the images directory goes with one rename and the
// deletion; an interrupted removal (trash left) is finished; other files of
// the data directory stay.
func TestRemoveImages(t *testing.T) {
	data := filepath.Join(t.TempDir(), "lazaret")
	os.MkdirAll(filepath.Join(data, ImagesDir, "busybox", "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(data, ImagesDir, "busybox", "index.json"), []byte("{}"), 0o644)
	found, err := RemoveImages(data, os.Getuid(), time.Now())
	if err != nil || !found {
		t.Fatalf("remove: %v %v", found, err)
	}
	if _, err := os.Lstat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty data directory left: %v", err)
	}
	if found, err := RemoveImages(data, os.Getuid(), time.Now()); err != nil || found {
		t.Fatalf("remove again: %v %v", found, err)
	}

	// Interrupted after the rename: the trash holds the images.
	os.MkdirAll(filepath.Join(data, TrashDir, "root-images.1", "busybox"), 0o755)
	os.WriteFile(filepath.Join(data, "other"), nil, 0o644)
	if n, err := PurgeImagesTrash(data, os.Getuid()); err != nil || n != 1 {
		t.Fatalf("finish: %d %v", n, err)
	}
	if got := names(t, data); strings.Join(got, " ") != "other" {
		t.Fatalf("data directory holds %v", got)
	}
	os.MkdirAll(filepath.Join(data, ImagesDir), 0o755)
	if found, err := RemoveImages(data, os.Getuid(), time.Now()); err != nil || !found {
		t.Fatalf("remove beside another file: %v %v", found, err)
	}
	if got := names(t, data); strings.Join(got, " ") != "other" {
		t.Fatalf("data directory holds %v", got)
	}
}
