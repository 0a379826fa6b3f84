package preparedcatalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/prepared"
)

// SourceOfRecord is the catalog's view of an artifact.json.
func SourceOfRecord(rec *prepared.Record) catalog.SourceImage {
	s := catalog.SourceImage{ImageName: rec.Source.Ref, ManifestDigest: rec.Source.ManifestDigest, ConfigDigest: rec.Source.ConfigDigest}
	for _, l := range rec.Layers {
		s.LayerDigests = append(s.LayerDigests, l.Digest)
		s.DiffIDs = append(s.DiffIDs, l.DiffID)
	}
	return s
}

// LockIdentity is the catalog's record of a preparation lock's inode.
func LockIdentity(l *prepared.PrepLock) catalog.FileIdentity { return catalog.FileIdentity(l.ID) }

// treeState maps a probe of a prepared tree to what RecoverReclaim reads.
func treeState(p prepared.Presence, err error) (catalog.TreeState, error) {
	if err != nil {
		return 0, err
	}
	switch p {
	case prepared.TreeAbsent:
		return catalog.TreeGone, nil
	case prepared.TreeIdle:
		return catalog.TreeIdle, nil
	case prepared.TreeExclusive:
		return catalog.TreeBusy, nil
	}
	return 0, fmt.Errorf("prepared tree probe: unknown presence %d", p)
}

// ProbeTreeAt is catalog.RecoverReclaim's probe of st: whether
// prepared/<id> is gone, idle (flock(LOCK_SH|LOCK_NB) succeeds: no gc
// holds it exclusively) or held exclusively by a live gc.
func ProbeTreeAt(st *prepared.Store) func(id string) (catalog.TreeState, error) {
	return func(id string) (catalog.TreeState, error) { return treeState(st.Probe(id)) }
}

// ProbeTree is ProbeTreeAt for callers outside the preparer (the Host
// Coordinator's lease acquisition recovers an interrupted reclamation).
func ProbeTree(storageRoot string) func(id string) (catalog.TreeState, error) {
	return func(id string) (catalog.TreeState, error) { return treeState(prepared.ProbeIn(storageRoot, id)) }
}

// RecordReclaim records how RecoverReclaim settled an interrupted
// reclamation: completed (ReclaimArtifact) or rolled back, the tree never
// having left (RollbackReclaim).
func RecordReclaim(st *prepared.Store, out catalog.ReclaimOutcome, id string) {
	switch out {
	case catalog.Completed:
		st.RecordStep("ReclaimArtifact", id)
	case catalog.RolledBack:
		st.RecordStep("RollbackReclaim", id)
	}
}

// SettleIntent ends the Running intent op of a preparer proven gone (the
// caller holds its preparation lock inode), deterministically: a valid
// tree at prepared/<artifact> from this intent's image rolls it forward;
// otherwise its staging tree, if any, is quarantined into prepared/.trash
// and the intent abandoned. It returns what it did.
func SettleIntent(st *prepared.Store, tx *catalog.Tx, op *v1.PreparationOperationRecordV1, hit func(string)) (string, error) {
	id := op.GetArtifactId()
	art, err := tx.Artifact(id)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return "", err
	}
	if art != nil && art.GetState() == catalog.Preparing && art.GetOperationId() == op.GetOperationId() {
		if rec, found, err := st.Lookup(id, op.GetManifestDigest()); err == nil && found {
			// Published by rename before the preparer died.
			if err := tx.PublishArtifact(op.GetOperationId(), rec.RootfsBytes); err != nil {
				return "", err
			}
			// The dead preparer's rename and this record are the model's
			// publication.
			st.RecordStep("PublishArtifact", id)
			return "published (the tree was renamed into place before the preparer died)", nil
		}
	}
	q, err := st.QuarantineStaging(op.GetStagingName())
	if err != nil {
		return "", err
	}
	if q != "" {
		hit("quarantined")
	}
	if _, err := tx.AbandonPreparation(op.GetOperationId(), q); err != nil {
		return "", err
	}
	st.RecordStep("RecoverStage", id)
	if q == "" {
		return "abandoned (its staging tree was never created or was already quarantined)", nil
	}
	return "quarantined into prepared/.trash/" + q + " and abandoned", nil
}

// Abandon ends this process's own failed preparation opID (under its
// preparation lock): quarantine its staging tree, abandon the intent,
// delete the quarantined tree (the caller is namespace root of the user
// namespace). hit is called at the crash points SettleIntent passes.
func Abandon(ctx context.Context, st *prepared.Store, cat *catalog.Catalog, opID string, lock *prepared.PrepLock, hit func(string), log *slog.Logger) error {
	var q string
	err := cat.Update(ctx, func(tx *catalog.Tx) error {
		op, err := tx.Operation(opID)
		if err != nil {
			return err
		}
		if op.GetLockIno() != lock.ID.Ino {
			return fmt.Errorf("intent %s names another lock inode", opID)
		}
		_, err = SettleIntent(st, tx, op, hit)
		if err == nil {
			q = prepared.QuarantineName(op.GetStagingName())
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := st.RemoveQuarantined(q); err != nil {
		log.Warn("deleting the quarantined staging tree failed; the next start deletes it", "quarantine", q, "err", err)
	}
	return nil
}
