package hc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/prepare"
	"github.com/lazaret/lazaret/pkg/proc"
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
	openTestStore(t, c, dir)
	ownDev, ownIno, ownID, err := pidfs.MountNamespaceOfPath("/proc/self/ns/mnt")
	if err != nil || ownID == 0 {
		t.Fatalf("own mount namespace %d:%d ID %d: %v", ownDev, ownIno, ownID, err)
	}
	otherID := ownID + 1<<40 // a namespace ID this process's namespace does not have
	cat, _ := c.storageCatalog()
	ctx := context.Background()
	md := "sha256:" + strings.Repeat("ab", 32)
	art := prepare.ArtifactID(md)
	ready := &lv1.ArtifactReady{PreparedArtifactId: art, ImageRef: c.image, ManifestDigest: md}
	hello0 := &lv1.SupervisorHello{MountNamespace: &lv1.NamespaceIdentity{Dev: ownDev, Ino: ownIno, MntnsId: &ownID}}
	// A real process stands in for RS: its slot is staged at spawn, and
	// recordLease commits it before the anchors are mounted.
	broker, err := proc.NewBroker(slog.New(slog.DiscardHandler), os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if c.rsChild, err = broker.Start("rs", proc.Command{Path: "/bin/sleep", Args: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.rsChild.Signal(unix.SIGKILL); c.rsChild.Wait(context.Background()) })
	// HC verifies the hello's mount namespace through RS's pidfd: (dev,
	// ino) and the never-reused ID must both be the process's.
	if err := verifyMountNamespace(c.rsChild.Handle(), hello0.MountNamespace); err != nil {
		t.Fatal(err)
	}
	for name, ns := range map[string]*lv1.NamespaceIdentity{
		"another ID": {Dev: ownDev, Ino: ownIno, MntnsId: &otherID}, "no ID": {Dev: ownDev, Ino: ownIno},
		"another inode": {Dev: ownDev, Ino: ownIno + 1, MntnsId: &ownID}, "none": nil,
	} {
		if err := verifyMountNamespace(c.rsChild.Handle(), ns); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatalf("hello mount namespace with %s: %v", name, err)
		}
	}
	newGen := func(gen uint64) {
		t.Helper()
		c.generation = gen
		if err := c.store.Update(func(tx *store.Tx) error {
			if err := tx.CreateGeneration(store.NewGeneration{Number: gen, ConfigurationFingerprint: []byte("f"), CoordinatorID: "hc", Coordinator: c.self}); err != nil {
				return err
			}
			return tx.PutParticipant(gen, participant.Sandbox, participant.Intent, nil)
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.store.Update(func(tx *store.Tx) error {
			return tx.PutParticipant(gen, participant.Sandbox, participant.Intent, sandboxSnapshot(&lv1.SandboxSnapshotV1{
				Coordinator: store.CommittedSlot(c.self), Supervisor: store.StagedSlot(c.rsChild.Identity()), Runsc: unassignedSlot()}))
		}); err != nil {
			t.Fatal(err)
		}
	}
	newGen(7)
	// HC never trusts RS: a tree no preparer recorded is not leased.
	plantArtifact(t, storage, art, md)
	if err := c.recordLease(ctx, ready, hello0); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "not recorded") {
		t.Fatalf("lease of an unrecorded artifact: %v", err)
	}
	recordPrepared(t, cat, art, md)
	newGen(8)
	wrong := &lv1.ArtifactReady{PreparedArtifactId: art, ImageRef: c.image, ManifestDigest: "sha256:" + strings.Repeat("cd", 32)}
	if err := c.recordLease(ctx, wrong, hello0); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("lease with a manifest digest the preparer did not record: %v", err)
	}
	// A gc that died after Reclaiming and before its rename is settled by
	// the next lease acquisition: the tree is still in place and no gc
	// holds it, so the record rolls back and the lease is taken.
	if err := cat.BeginReclaim(ctx, art, art+".1"); err != nil {
		t.Fatal(err)
	}
	newGen(9)
	if err := c.recordLease(ctx, ready, hello0); err != nil {
		t.Fatalf("lease after an interrupted reclamation: %v", err)
	}
	// RS's slot was promoted before LeaseRecorded lets it mount.
	if err := c.store.View(func(tx *store.Tx) error {
		p, err := tx.Participant(9, participant.Sandbox)
		if err != nil {
			return err
		}
		if sl, _ := store.SlotFromProto(p.Snapshot.GetSandbox().GetSupervisor()); sl.State != participant.CommittedSlot || sl.Identity != c.rsChild.Identity() {
			return fmt.Errorf("sandbox supervisor slot after the lease is %s, want Committed(%s)", sl, c.rsChild.Identity())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.releaseAnchorIntent(); err != nil {
		t.Fatal(err)
	}
	if err := c.releaseLower(ctx, 9, nil, "test", false); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("release of generation 9 with its namespace held: %v", err)
	}

	run := func(gen uint64, ns *lv1.NamespaceIdentity) {
		t.Helper()
		newGen(gen)
		hello := &lv1.SupervisorHello{MountNamespace: ns}
		if err := c.recordLease(ctx, ready, hello); err != nil {
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
		wrongID := ns.GetMntnsId() + 1
		reused := &lv1.AnchorsMounted{PreparedArtifactId: art, MountNamespace: &lv1.NamespaceIdentity{Dev: ns.Dev, Ino: ns.Ino, MntnsId: &wrongID}, Anchors: mounted.Anchors}
		if err := c.recordAnchorsMounted(reused, hello); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatalf("anchors in a namespace with the same inode and another ID: %v", err)
		}
		short := &lv1.AnchorsMounted{PreparedArtifactId: art, MountNamespace: ns, Anchors: mounted.Anchors[1:]}
		if err := c.recordAnchorsMounted(short, hello); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatalf("anchors missing a persistent path: %v", err)
		}
		if err := c.recordAnchorsMounted(mounted, hello); err != nil {
			t.Fatal(err)
		}
		if _, err := c.releaseAnchorIntent(); err != nil {
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
	run(10, &lv1.NamespaceIdentity{Dev: ownDev, Ino: ownIno, MntnsId: &ownID})
	all := []uint64{100, 101, 102, 103, 104, 105, 106, 107}
	if err := c.releaseLower(ctx, 10, all, "test", false); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("release with the mount namespace held: %v", err)
	}
	if pl, sa := phases(10); pl != participant.LeaseHeld || sa != participant.ReleaseIntent {
		t.Fatalf("retained records: prepared_lower %s state_anchor %s", pl, sa)
	}
	if err := cat.BeginReclaim(ctx, art, art+".2"); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("gc reclaim of a leased artifact: %v", err)
	}

	// Generation 2: its namespace (an inode no namespace has) is gone.
	run(11, &lv1.NamespaceIdentity{Dev: ownDev, Ino: 1})
	if err := c.releaseLower(ctx, 11, nil, "test", false); err != nil {
		t.Fatal(err)
	}
	if pl, sa := phases(11); pl != participant.Clean || sa != participant.Clean {
		t.Fatalf("released: prepared_lower %s state_anchor %s", pl, sa)
	}
	ls, _ := cat.Leases(ctx, art)
	if len(ls) != 2 || ls[0].Generation != 9 || ls[1].Generation != 10 {
		t.Fatalf("leases after releasing generation 11: %+v (want only generation 9's and 10's)", ls)
	}

	// Generation 12 recorded a mount namespace since freed whose nsfs
	// inode the kernel handed to a younger namespace (here: this
	// process's, with another ID). That namespace's processes are not
	// holders of the recorded one: the mounts are proven absent.
	run(12, &lv1.NamespaceIdentity{Dev: ownDev, Ino: ownIno, MntnsId: &otherID})
	if err := c.releaseLower(ctx, 12, nil, "test", false); err != nil {
		t.Fatalf("release with the recorded namespace's inode reused by a live one: %v", err)
	}
	if pl, sa := phases(12); pl != participant.Clean || sa != participant.Clean {
		t.Fatalf("released despite inode reuse: prepared_lower %s state_anchor %s", pl, sa)
	}

	// Generation 13 records LeaseHeld, but its catalog lease vanished:
	// recovery fails closed and keeps every record.
	run(13, &lv1.NamespaceIdentity{Dev: ownDev, Ino: 1})
	if _, err := cat.ReleaseLease(ctx, c.leaseKey(13, art), catalog.ReleaseProof{
		ReleaseIntent: func(catalog.LeaseKey) error { return nil }, MountAbsent: func(catalog.LeaseKey) error { return nil },
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.releaseLower(ctx, 13, nil, "test", false); !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "has no lease") {
		t.Fatalf("release of a LeaseHeld record without its catalog lease: %v", err)
	}
	if pl, _ := phases(13); pl != participant.LeaseHeld {
		t.Fatalf("prepared_lower %s after the refused release, want LeaseHeld kept", pl)
	}
}

// plantArtifact writes a published tree prepared/<id> as pkg/prepare
// validates it (artifact.json and every mount point).
func plantArtifact(t *testing.T, storage, id, md string) {
	t.Helper()
	dir := filepath.Join(storage, "prepared", id)
	if err := os.MkdirAll(filepath.Join(storage, "prepared", ".staging"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, mp := range prepare.MountPoints {
		p := filepath.Join(dir, "rootfs", mp.Path)
		if mp.Dir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rec := fmt.Sprintf(`{"format_version": %d, "id": %q, "source": {"ref": "oci:/img:latest", "manifest_digest": %q, "config_digest": %q},
		"preparer": "test", "created": "2026-11-30T07:00:00Z", "layers": [], "rootfs_bytes": 1, "skipped_device_nodes": 0, "converted_whiteout_devices": 0}`,
		prepare.FormatVersion, id, md, "sha256:"+strings.Repeat("ef", 32))
	if err := os.WriteFile(filepath.Join(dir, "artifact.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
}

// recordPrepared records id as its preparer would.
func recordPrepared(t *testing.T, cat *catalog.Catalog, id, md string) {
	t.Helper()
	dom := domain.DeriveID("default", "/elsewhere")
	if err := cat.Update(context.Background(), func(tx *catalog.Tx) error {
		if err := tx.BeginPreparation(catalog.Preparation{OperationID: "prep-1", ArtifactID: id, PreparerVersion: "test", DomainID: dom, Generation: 1, StagingName: "s",
			Source:   catalog.SourceImage{ImageName: "oci:/img:latest", ManifestDigest: md, ConfigDigest: "sha256:" + strings.Repeat("ef", 32)},
			Lock:     catalog.FileIdentity{Dev: 1, Ino: 2},
			Preparer: catalog.ProcessIdentity{BootID: [16]byte{1}, PidfsDev: 1, PidfsIno: 3, PID: 4}}); err != nil {
			return err
		}
		return tx.PublishArtifact("prep-1", 1)
	}); err != nil {
		t.Fatal(err)
	}
}

// openTestStore gives c (paths.ID set) a Domain Store in dir, closed when
// the test ends, and this test process as its coordinator identity.
func openTestStore(t *testing.T, c *coordinator, dir string) {
	t.Helper()
	lock, err := os.Create(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if c.store, err = store.Open(dir, lock, store.DomainIdentity{ID: c.paths.ID, Profile: "default", CanonicalWorkspace: "/w"}, store.Options{Logger: c.log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.store.Close() })
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	c.self = self.Identity()
	self.Close()
}
