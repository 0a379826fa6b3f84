package hc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// TestLeaseOrderingAndProvenRelease (§3.5, FR-17) against a real Domain
// Store and Storage Catalog: acquisition leaves prepared_lower LeaseHeld,
// the exact catalog lease and state_anchor Intent; AnchorsMounted for the
// wrong namespace or paths is refused; Prepared records the mounts. Release
// while the recorded mount namespace is still held (here: this test's own)
// retains every record and the lease, whatever RS reported unmounted; with
// the namespace gone, state_anchor and prepared_lower become Clean and the
// lease is removed. gc's catalog view (GCReclaimer) refuses while the lease
// exists.
func TestLeaseOrderingAndProvenRelease(t *testing.T) {
	cfg, err := config.Parse("", nil, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prof, _ := cfg.Profile("default")
	if len(prof.PersistentPaths) == 0 {
		t.Fatal("the default profile has no persistent paths")
	}
	dir := t.TempDir()
	storage := filepath.Join(dir, "storage")
	os.Mkdir(storage, 0o700)
	c := &coordinator{profile: prof, image: "docker.io/library/busybox:1", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c.paths.ID = domain.DeriveID("default", "/w")
	c.paths.StorageRoot = storage
	lock, err := os.Create(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if c.store, err = store.Open(dir, lock, store.DomainIdentity{ID: c.paths.ID, Profile: "default", CanonicalWorkspace: "/w"}, store.Options{Logger: c.log}); err != nil {
		t.Fatal(err)
	}
	defer c.store.Close()
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	c.self = self.Identity()
	self.Close()
	ownDev, ownIno, err := pidfs.NamespaceOfPath("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := c.storageCatalog()
	ctx := context.Background()
	const art = "pl-0123456789abcdef0123456789abcdef"

	run := func(gen uint64, ns *lv1.NamespaceIdentity) {
		t.Helper()
		c.generation = gen
		if err := c.store.Update(func(tx *store.Tx) error {
			return tx.CreateGeneration(store.NewGeneration{Number: gen, ConfigurationFingerprint: []byte("f"), CoordinatorID: "hc", Coordinator: c.self})
		}); err != nil {
			t.Fatal(err)
		}
		hello := &lv1.SupervisorHello{MountNamespace: ns}
		if err := c.recordLease(ctx, &lv1.ArtifactReady{PreparedArtifactId: art, ImageRef: c.image, ManifestDigest: "sha256:00"}, hello); err != nil {
			t.Fatal(err)
		}
		c.store.View(func(tx *store.Tx) error {
			pl, _ := tx.Participant(gen, participant.PreparedLower)
			sa, _ := tx.Participant(gen, participant.StateAnchor)
			if pl == nil || pl.Phase != participant.LeaseHeld || sa == nil || sa.Phase != participant.Intent {
				t.Fatalf("after acquisition: prepared_lower %v state_anchor %v", pl, sa)
			}
			return nil
		})
		if l, err := cat.Leases(ctx, art); err != nil || len(l) == 0 {
			t.Fatalf("no catalog lease after acquisition: %v %v", l, err)
		}
		mounted := &lv1.AnchorsMounted{PreparedArtifactId: art, MountNamespace: ns}
		for i, p := range prof.PersistentPaths {
			mounted.Anchors = append(mounted.Anchors, &lv1.AnchorMount{GuestPath: p, MountId: uint64(100 + i), Target: "/b/anchors/x", Upper: "/u"})
		}
		wrongNS := &lv1.AnchorsMounted{PreparedArtifactId: art, MountNamespace: &lv1.NamespaceIdentity{Dev: ns.Dev, Ino: ns.Ino + 1}, Anchors: mounted.Anchors}
		if err := c.recordAnchorsMounted(wrongNS, hello); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatalf("anchors in another namespace: %v", err)
		}
		short := &lv1.AnchorsMounted{PreparedArtifactId: art, MountNamespace: ns, Anchors: mounted.Anchors[1:]}
		if err := c.recordAnchorsMounted(short, hello); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatalf("anchors missing a persistent path: %v", err)
		}
		if err := c.recordAnchorsMounted(mounted, hello); err != nil {
			t.Fatal(err)
		}
		if err := c.releaseAnchorIntent(); err != nil {
			t.Fatal(err)
		}
	}
	phases := func(gen uint64) (participant.Phase, participant.Phase) {
		var a, b participant.Phase
		c.store.View(func(tx *store.Tx) error {
			pl, _ := tx.Participant(gen, participant.PreparedLower)
			sa, _ := tx.Participant(gen, participant.StateAnchor)
			a, b = pl.Phase, sa.Phase
			return nil
		})
		return a, b
	}

	// Generation 1: its mount namespace is still held (by this process).
	run(1, &lv1.NamespaceIdentity{Dev: ownDev, Ino: ownIno})
	all := []uint64{100, 101, 102, 103, 104, 105, 106, 107}
	if err := c.releaseLower(ctx, 1, all, "test"); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("release with the mount namespace held: %v", err)
	}
	if pl, sa := phases(1); pl != participant.LeaseHeld || sa != participant.ReleaseIntent {
		t.Fatalf("retained records: prepared_lower %s state_anchor %s", pl, sa)
	}
	if err := (catalog.GCReclaimer{Catalog: cat, Ctx: ctx}).BeginReclaim(art); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("gc reclaim of a leased artifact: %v", err)
	}

	// Generation 2: its namespace (an inode no namespace has) is gone.
	run(2, &lv1.NamespaceIdentity{Dev: ownDev, Ino: 1})
	if err := c.releaseLower(ctx, 2, nil, "test"); err != nil {
		t.Fatal(err)
	}
	if pl, sa := phases(2); pl != participant.Clean || sa != participant.Clean {
		t.Fatalf("released: prepared_lower %s state_anchor %s", pl, sa)
	}
	ls, _ := cat.Leases(ctx, art)
	if len(ls) != 1 || ls[0].Generation != 1 {
		t.Fatalf("leases after releasing generation 2: %+v (want only generation 1's)", ls)
	}
}
