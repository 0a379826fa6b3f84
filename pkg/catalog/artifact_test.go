package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// TestPrepareIntentRecordsIdentity: the intent carries the staging name,
// the lock inode, the preparer's pidfs identity and the source image; an
// incomplete intent is refused; publication keeps the identity.
func TestPrepareIntentRecordsIdentity(t *testing.T) {
	ctx := context.Background()
	c := newCatalog(t, t.TempDir())
	for name, mut := range map[string]func(p *Preparation){
		"no manifest":      func(p *Preparation) { p.Source.ManifestDigest = "" },
		"no config":        func(p *Preparation) { p.Source.ConfigDigest = "latest" },
		"no image name":    func(p *Preparation) { p.Source.ImageName = "" },
		"layers mismatch":  func(p *Preparation) { p.Source.DiffIDs = nil },
		"no lock inode":    func(p *Preparation) { p.Lock = FileIdentity{} },
		"no pidfs":         func(p *Preparation) { p.Preparer.PidfsIno = 0 },
		"no boot id":       func(p *Preparation) { p.Preparer.BootID = [16]byte{} },
		"staging with '/'": func(p *Preparation) { p.StagingName = "../x" },
		"staging ..":       func(p *Preparation) { p.StagingName = ".." },
	} {
		p := prep("op-bad", "pl-bad", "s", domA, 1)
		mut(&p)
		err := c.Update(ctx, func(tx *Tx) error { return tx.BeginPreparation(p) })
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	must(t, "begin", c.Update(ctx, func(tx *Tx) error { return tx.BeginPreparation(prep("op-1", "pl-1", "s1", domA, 3)) }))
	must(t, "read intent", c.View(ctx, func(tx *Tx) error {
		ops, err := tx.RunningOperations()
		if err != nil {
			return err
		}
		if len(ops) != 1 {
			t.Fatalf("running %v", ops)
		}
		op := ops[0]
		if op.GetStagingName() != "s1" || op.GetLockIno() != 42 || op.GetLockDev() != 1 || op.GetPreparerPidfsIno() != 77 ||
			op.GetPreparerBootId()[0] != 1 || op.GetManifestDigest() != testSource.ManifestDigest || op.GetImageName() != testSource.ImageName ||
			op.GetDomainId() != string(domA) || op.GetGeneration() != 3 {
			t.Errorf("intent %v", op)
		}
		a, err := tx.Artifact("pl-1")
		if err != nil {
			return err
		}
		if a.GetState() != Preparing || a.GetOrigin() != OriginPrepared || a.GetOperationId() != "op-1" ||
			!slices.Equal(a.GetLayerDigests(), testSource.LayerDigests) || a.GetConfigDigest() != testSource.ConfigDigest {
			t.Errorf("artifact %v", a)
		}
		return nil
	}))
	refused(t, "abandon unknown", c.Update(ctx, func(tx *Tx) error {
		_, err := tx.AbandonPreparation("op-x", "")
		return errdefs.Mark(err, errdefs.ErrRefused)
	}))
	must(t, "publish", c.Update(ctx, func(tx *Tx) error { return tx.PublishArtifact("op-1", 1234) }))
	refused(t, "abandon published", c.Update(ctx, func(tx *Tx) error { _, err := tx.AbandonPreparation("op-1", ""); return err }))
	must(t, "read published", c.View(ctx, func(tx *Tx) error {
		a, err := tx.Artifact("pl-1")
		if err != nil {
			return err
		}
		if a.GetState() != Published || a.GetRootfsBytes() != 1234 || SourceOf(a).ManifestDigest != testSource.ManifestDigest {
			t.Errorf("published %v", a)
		}
		ops, err := tx.RunningOperations()
		if len(ops) != 0 {
			t.Errorf("still running: %v", ops)
		}
		return err
	}))
	// Adoption of a tree prepared before schema 2.
	refused(t, "adopt existing", c.Update(ctx, func(tx *Tx) error {
		return tx.AdoptArtifact(Adoption{ArtifactID: "pl-1", OperationID: "adopt-1", PreparerVersion: "p", Source: testSource})
	}))
	must(t, "adopt", c.Update(ctx, func(tx *Tx) error {
		return tx.AdoptArtifact(Adoption{ArtifactID: "pl-2", OperationID: "adopt-2", PreparerVersion: "p", Source: testSource, RootfsBytes: 5})
	}))
	must(t, "adopted", c.View(ctx, func(tx *Tx) error {
		a, err := tx.Artifact("pl-2")
		if err == nil && (a.GetState() != Published || a.GetOrigin() != OriginAdopted) {
			t.Errorf("adopted %v", a)
		}
		return err
	}))
}

// TestRecoverReclaim: an interrupted reclamation is completed when the tree
// left prepared/, rolled back when it provably did not (no gc holds it),
// and left alone while a live gc holds it; leases are possible again after
// the roll-back.
func TestRecoverReclaim(t *testing.T) {
	ctx := context.Background()
	c := newCatalog(t, t.TempDir())
	probe := func(s TreeState) func(string) (TreeState, error) {
		return func(string) (TreeState, error) { return s, nil }
	}
	recoverWith := func(id string, s TreeState) ReclaimOutcome {
		var out ReclaimOutcome
		must(t, "recover", c.Update(ctx, func(tx *Tx) error {
			var err error
			out, err = tx.RecoverReclaim(id, probe(s))
			return err
		}))
		return out
	}
	publish(t, c, "pl-1")
	if out := recoverWith("pl-1", TreeGone); out != NotReclaiming {
		t.Fatalf("published artifact: %v", out)
	}
	if out := recoverWith("pl-none", TreeGone); out != NotReclaiming {
		t.Fatalf("unknown artifact: %v", out)
	}
	must(t, "reclaim", c.BeginReclaim(ctx, "pl-1", "pl-1.7"))
	k := LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 1}
	refused(t, "lease while reclaiming", c.AcquireLease(ctx, k))
	must(t, "trash name recorded", c.View(ctx, func(tx *Tx) error {
		a, err := tx.Artifact("pl-1")
		if err == nil && (a.GetState() != Reclaiming || a.GetReclaimTrashName() != "pl-1.7") {
			t.Errorf("reclaiming %v", a)
		}
		return err
	}))
	if out := recoverWith("pl-1", TreeBusy); out != InFlight {
		t.Fatalf("busy: %v", out)
	}
	refused(t, "lease while a gc holds it", c.AcquireLease(ctx, k))
	if out := recoverWith("pl-1", TreeIdle); out != RolledBack {
		t.Fatalf("idle: %v", out)
	}
	must(t, "lease after roll-back", c.AcquireLease(ctx, k))
	always := func(LeaseKey) error { return nil }
	_, err := c.ReleaseLease(ctx, k, ReleaseProof{ReleaseIntent: always, MountAbsent: always})
	must(t, "release", err)
	must(t, "reclaim again", c.BeginReclaim(ctx, "pl-1", "pl-1.8"))
	if out := recoverWith("pl-1", TreeGone); out != Completed {
		t.Fatalf("gone: %v", out)
	}
	must(t, "removed", c.View(ctx, func(tx *Tx) error {
		if _, err := tx.Artifact("pl-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("record after completion: %v", err)
		}
		if _, err := tx.Operation("op-pl-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("operation after completion: %v", err)
		}
		return nil
	}))
	probeErr := c.Update(ctx, func(tx *Tx) error {
		publishTx(t, tx, "pl-2")
		if err := tx.BeginReclaim("pl-2", "pl-2.1"); err != nil {
			return err
		}
		_, err := tx.RecoverReclaim("pl-2", func(string) (TreeState, error) { return 0, errors.New("EIO") })
		return err
	})
	if probeErr == nil || !strings.Contains(probeErr.Error(), "EIO") {
		t.Fatalf("probe error: %v", probeErr)
	}
}

func publishTx(t *testing.T, tx *Tx, id string) {
	t.Helper()
	must(t, "begin", tx.BeginPreparation(prep("op-"+id, id, "s-"+id, domA, 1)))
	must(t, "publish", tx.PublishArtifact("op-"+id, 1))
}

// testMigrateV1toV2: a schema-1 catalog (records of record_version 1, an
// artifact a coordinator registered) reads as schema 2 and is rewritten
// with the first write; a View migrates in memory only.
func testMigrateV1toV2(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()}})
	must(t, "raw open", err)
	md := "sha256:" + strings.Repeat("a", 64)
	k := LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 2}
	for key, m := range map[string][]byte{
		"a/pl-1": mustMarshal(&v1.PreparedArtifactRecordV1{RecordVersion: 1, ArtifactId: "pl-1", SourceIdentity: md, PreparerVersion: "lazaret-prepare format 2", State: Published, CreatedUnixNano: 1}),
		"o/register-x-2": mustMarshal(&v1.PreparationOperationRecordV1{RecordVersion: 1, OperationId: "register-x-2", ArtifactId: "pl-1", DomainId: string(domA), Generation: 2,
			StagingName: "pl-1", State: opPublished}),
		string(leaseKey(k)): mustMarshal(&v1.PreparedLowerLeaseRecordV1{RecordVersion: 1, ArtifactId: "pl-1", DomainId: string(domA), Generation: 2, AcquiredUnixNano: 5}),
		string(keyVersion):  mustMarshal(&v1.SchemaVersionV1{Version: 1}),
	} {
		must(t, "plant", db.Set([]byte(key), m, pebble.Sync))
	}
	must(t, "close", db.Close())
	c := newCatalog(t, root)
	check := func() {
		must(t, "read migrated", c.View(ctx, func(tx *Tx) error {
			a, err := tx.Artifact("pl-1")
			if err != nil {
				return err
			}
			if a.GetOrigin() != OriginRegisteredV1 || a.GetManifestDigest() != md || a.GetState() != Published || a.GetRecordVersion() != 2 {
				t.Errorf("migrated artifact %v", a)
			}
			if l, err := tx.Lease(k); err != nil || l.Acquired.UnixNano() != 5 {
				t.Errorf("migrated lease %v %v", l, err)
			}
			_, err = tx.Operation("register-x-2")
			return err
		}))
	}
	check()
	if v := rawVersion(t, root); v != 1 {
		t.Fatalf("a View rewrote the version: %d", v)
	}
	must(t, "write", c.AcquireLease(ctx, LeaseKey{ArtifactID: "pl-1", DomainID: domB, Generation: 1}))
	if v := rawVersion(t, root); v != 2 {
		t.Fatalf("version after the first write: %d", v)
	}
	check()
}

func rawVersion(t *testing.T, root string) uint32 {
	t.Helper()
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()}})
	must(t, "raw open", err)
	defer db.Close()
	b, closer, err := db.Get(keyVersion)
	must(t, "get version", err)
	defer closer.Close()
	var sv v1.SchemaVersionV1
	must(t, "decode", proto.Unmarshal(b, &sv))
	return sv.GetVersion()
}
