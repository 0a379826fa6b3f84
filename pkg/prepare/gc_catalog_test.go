package prepare

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
)

// TestGCRespectsCatalogLeases (OR-7): with the Storage Catalog consulted,
// an artifact no process holds but a generation's catalog lease names is
// kept (dry run and real run); once the exact lease is released it is
// reclaimed, its catalog record moved to Reclaiming and removed; an
// artifact the catalog never recorded is reclaimed as before.
func TestGCRespectsCatalogLeases(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	ctx := context.Background()
	a, err := Ensure(ctx, Options{StorageRoot: root, ImageRef: busyboxRef(t), DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(root, catalog.Options{LockTimeout: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	dom := domain.DeriveID("default", "/home/dev/gc")
	key := catalog.LeaseKey{ArtifactID: a.ID, DomainID: dom, Generation: 3}
	// The preparer recorded the artifact itself.
	if err := cat.AcquireLease(ctx, key); err != nil {
		t.Fatal(err)
	}
	policy := preparedcatalog.GCPolicy{Catalog: cat, Ctx: ctx}
	for _, dry := range []bool{true, false} {
		res, err := preparedcatalog.GC(root, policy, dry, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Entries) != 1 || res.Entries[0].Action != "keep" {
			t.Fatalf("dry=%v: leased artifact not kept: %+v", dry, res.Entries)
		}
	}
	if _, err := os.Stat(a.Dir); err != nil {
		t.Fatalf("leased artifact moved: %v", err)
	}
	// Without the Domain's ReleaseIntent proof the lease stays.
	_, err = cat.ReleaseLease(ctx, key, catalog.ReleaseProof{
		ReleaseIntent: func(catalog.LeaseKey) error { return errdefs.New(errdefs.ErrRefused, "prepared_lower is LeaseHeld") },
		MountAbsent:   func(catalog.LeaseKey) error { return nil }})
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("release without proof: %v", err)
	}
	if res, _ := preparedcatalog.GC(root, policy, false, time.Now()); res.Entries[0].Action != "keep" {
		t.Fatalf("artifact reclaimed with its lease retained: %+v", res.Entries)
	}
	if _, err := cat.ReleaseLease(ctx, key, catalog.ReleaseProof{
		ReleaseIntent: func(catalog.LeaseKey) error { return nil }, MountAbsent: func(catalog.LeaseKey) error { return nil }}); err != nil {
		t.Fatal(err)
	}
	res, err := preparedcatalog.GC(root, policy, false, time.Now())
	if err != nil || len(res.Entries) != 1 || res.Entries[0].Action != "reclaimed" {
		t.Fatalf("unleased artifact not reclaimed: %+v %v", res, err)
	}
	if err := cat.View(ctx, func(tx *catalog.Tx) error { _, err := tx.Artifact(a.ID); return err }); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("catalog record after reclamation: %v", err)
	}
	// A tree the catalog never recorded (prepared before schema 2) has no
	// lease: gc reclaims it; a preparer adopts it instead.
	b, err := Ensure(ctx, Options{StorageRoot: root, ImageRef: busyboxRef(t), DomainID: testDomain, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	dropRecord(t, cat, b.ID)
	if res, err := preparedcatalog.GC(root, policy, false, time.Now()); err != nil || len(res.Entries) != 1 || res.Entries[0].Action != "reclaimed" {
		t.Fatalf("unrecorded artifact %s: %+v %v", b.ID, res, err)
	}
	prepared.PurgeTrash(context.Background(), root)
}
