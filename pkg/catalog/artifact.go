package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// ---------------------------------------------------------------------------
// Artifacts and preparation (schema 2).
//
// The preparer (pkg/prepare) records its own steps:
//
//	BeginPreparation   the durable prepare intent: operation Running (staging name, lock and
//	                   preparer identity, source image) and artifact Preparing, before the
//	                   staging tree exists
//	PublishArtifact    after the staging tree was renamed to prepared/<id>: both Published
//	AbandonPreparation after the staging tree was quarantined into prepared/.trash (or never
//	                   existed): the operation and the Preparing record are removed
//
// and gc reclaims through BeginReclaim (Reclaiming + the trash name, before
// the rename) → RemoveArtifact (after it), or RollbackReclaim when the
// rename provably did not happen.

// ArtifactState is a prepared artifact's lifecycle state.
type ArtifactState = v1.PreparedArtifactState

const (
	Preparing  = v1.PreparedArtifactState_PREPARED_ARTIFACT_STATE_PREPARING
	Published  = v1.PreparedArtifactState_PREPARED_ARTIFACT_STATE_PUBLISHED
	Reclaiming = v1.PreparedArtifactState_PREPARED_ARTIFACT_STATE_RECLAIMING
)

// Origins of an artifact record.
const (
	OriginPrepared     = v1.PreparedArtifactOrigin_PREPARED_ARTIFACT_ORIGIN_PREPARED
	OriginAdopted      = v1.PreparedArtifactOrigin_PREPARED_ARTIFACT_ORIGIN_ADOPTED
	OriginRegisteredV1 = v1.PreparedArtifactOrigin_PREPARED_ARTIFACT_ORIGIN_REGISTERED_V1
)

const (
	opRunning   = v1.PreparationOperationState_PREPARATION_OPERATION_STATE_RUNNING
	opPublished = v1.PreparationOperationState_PREPARATION_OPERATION_STATE_PUBLISHED
)

// SourceImage is the identity of the image an artifact is prepared from.
type SourceImage struct {
	ImageName      string   // the reference the preparer was given
	ManifestDigest string   // the single-platform manifest (the artifact ID derives from it)
	ConfigDigest   string   // the image configuration
	LayerDigests   []string // compressed layer blobs, bottom first
	DiffIDs        []string // uncompressed layers, same order
}

func (s SourceImage) validate() error {
	if s.ImageName == "" || !isDigest(s.ManifestDigest) || !isDigest(s.ConfigDigest) {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: source image %q (manifest %q, config %q): image name and both digests are required", s.ImageName, s.ManifestDigest, s.ConfigDigest)
	}
	if len(s.LayerDigests) != len(s.DiffIDs) {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: source image %s: %d layer digests but %d diff IDs", s.ImageName, len(s.LayerDigests), len(s.DiffIDs))
	}
	for _, d := range append(append([]string(nil), s.LayerDigests...), s.DiffIDs...) {
		if !isDigest(d) {
			return errdefs.New(errdefs.ErrInvalid, "storage catalog: source image %s: %q is not a digest", s.ImageName, d)
		}
	}
	return nil
}

func isDigest(s string) bool {
	alg, hex, ok := strings.Cut(s, ":")
	return ok && alg != "" && len(hex) >= 32 && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e })
}

// SourceOf returns the source image an artifact record names.
func SourceOf(rec *v1.PreparedArtifactRecordV1) SourceImage {
	return SourceImage{ImageName: rec.GetImageName(), ManifestDigest: rec.GetManifestDigest(), ConfigDigest: rec.GetConfigDigest(),
		LayerDigests: rec.GetLayerDigests(), DiffIDs: rec.GetDiffIds()}
}

// FileIdentity names one inode.
type FileIdentity struct{ Dev, Ino uint64 }

// ProcessIdentity is the preparer's pidfs identity (pkg/pidfs.Authority)
// plus its pid as it sees it (a locator only).
type ProcessIdentity struct {
	BootID   [16]byte
	PidfsDev uint64
	PidfsIno uint64
	PID      uint32
}

// Artifact returns a prepared artifact record (ErrNotFound).
func (tx *Tx) Artifact(id string) (*v1.PreparedArtifactRecordV1, error) {
	if err := validID("artifact ID", id); err != nil {
		return nil, err
	}
	key := artifactKey(id)
	b, ok, err := tx.get(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("storage catalog: artifact %s: %w", id, ErrNotFound)
	}
	var rec v1.PreparedArtifactRecordV1
	if err := tx.decode(key, b, &rec, rec.GetRecordVersion); err != nil {
		return nil, err
	}
	if rec.GetArtifactId() != id {
		return nil, corrupt("artifact record %q names %q", key, rec.GetArtifactId())
	}
	return &rec, nil
}

// Artifacts lists every prepared artifact.
func (tx *Tx) Artifacts() ([]*v1.PreparedArtifactRecordV1, error) {
	var out []*v1.PreparedArtifactRecordV1
	err := tx.scan([]byte(prefixArtifact), func(k, b []byte) error {
		var rec v1.PreparedArtifactRecordV1
		if err := tx.decode(k, b, &rec, rec.GetRecordVersion); err != nil {
			return err
		}
		out = append(out, &rec)
		return nil
	})
	return out, err
}

// Preparation is the durable prepare intent of one preparation.
type Preparation struct {
	OperationID     string
	ArtifactID      string
	PreparerVersion string
	DomainID        domain.ID
	Generation      uint64
	// StagingName is the entry under prepared/.staging the tree is staged in.
	StagingName string
	Source      SourceImage
	// Lock is the inode of prepared/.locks/<ArtifactID> the preparer holds
	// flock(LOCK_EX) on for the operation's whole life.
	Lock     FileIdentity
	Preparer ProcessIdentity
}

// Operation returns a preparation operation record (ErrNotFound).
func (tx *Tx) Operation(id string) (*v1.PreparationOperationRecordV1, error) {
	if err := validID("operation ID", id); err != nil {
		return nil, err
	}
	key := operationKey(id)
	b, ok, err := tx.get(key)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("storage catalog: operation %s: %w", id, ErrNotFound)
	}
	var rec v1.PreparationOperationRecordV1
	if err := tx.decode(key, b, &rec, rec.GetRecordVersion); err != nil {
		return nil, err
	}
	return &rec, nil
}

// Operations lists every preparation operation record.
func (tx *Tx) Operations() ([]*v1.PreparationOperationRecordV1, error) {
	var out []*v1.PreparationOperationRecordV1
	err := tx.scan([]byte(prefixOperation), func(k, b []byte) error {
		var rec v1.PreparationOperationRecordV1
		if err := tx.decode(k, b, &rec, rec.GetRecordVersion); err != nil {
			return err
		}
		out = append(out, &rec)
		return nil
	})
	return out, err
}

// RunningOperations lists the prepare intents not yet ended.
func (tx *Tx) RunningOperations() ([]*v1.PreparationOperationRecordV1, error) {
	all, err := tx.Operations()
	var out []*v1.PreparationOperationRecordV1
	for _, op := range all {
		if op.GetState() == opRunning {
			out = append(out, op)
		}
	}
	return out, err
}

// BeginPreparation writes the durable prepare intent: a Running operation
// and its artifact as Preparing. The artifact ID must be new.
func (tx *Tx) BeginPreparation(p Preparation) error {
	if err := tx.writable(); err != nil {
		return err
	}
	for _, f := range [][2]string{{"operation ID", p.OperationID}, {"artifact ID", p.ArtifactID}, {"staging name", p.StagingName}} {
		if err := validID(f[0], f[1]); err != nil {
			return err
		}
	}
	if p.PreparerVersion == "" {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: preparation without a preparer version")
	}
	if err := p.Source.validate(); err != nil {
		return err
	}
	if !p.DomainID.Valid() || p.Generation == 0 {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: preparation for Domain %q generation %d", p.DomainID, p.Generation)
	}
	if p.Lock.Ino == 0 || p.Preparer.PidfsIno == 0 || p.Preparer.BootID == ([16]byte{}) {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: prepare intent without the preparation lock's inode or the preparer's pidfs identity")
	}
	if _, err := tx.Artifact(p.ArtifactID); err == nil {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s already exists", p.ArtifactID)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	if _, err := tx.Operation(p.OperationID); err == nil {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: operation %s already exists", p.OperationID)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	now := tx.now()
	s := p.Source
	if err := tx.set(artifactKey(p.ArtifactID), &v1.PreparedArtifactRecordV1{RecordVersion: recordVersion, ArtifactId: p.ArtifactID,
		SourceIdentity: s.ImageName + "@" + s.ManifestDigest, PreparerVersion: p.PreparerVersion, State: Preparing, CreatedUnixNano: now, UpdatedUnixNano: now,
		ImageName: s.ImageName, ManifestDigest: s.ManifestDigest, ConfigDigest: s.ConfigDigest, LayerDigests: s.LayerDigests, DiffIds: s.DiffIDs,
		Origin: OriginPrepared, OperationId: p.OperationID}); err != nil {
		return err
	}
	return tx.set(operationKey(p.OperationID), &v1.PreparationOperationRecordV1{RecordVersion: recordVersion, OperationId: p.OperationID,
		ArtifactId: p.ArtifactID, DomainId: string(p.DomainID), Generation: p.Generation, StagingName: p.StagingName,
		State: opRunning, StartedUnixNano: now, UpdatedUnixNano: now,
		LockDev: p.Lock.Dev, LockIno: p.Lock.Ino, PreparerBootId: p.Preparer.BootID[:], PreparerPidfsDev: p.Preparer.PidfsDev,
		PreparerPidfsIno: p.Preparer.PidfsIno, PreparerPid: p.Preparer.PID, ImageName: s.ImageName, ManifestDigest: s.ManifestDigest})
}

func (tx *Tx) runningOperation(opID string) (*v1.PreparationOperationRecordV1, *v1.PreparedArtifactRecordV1, error) {
	op, err := tx.Operation(opID)
	if err != nil {
		return nil, nil, err
	}
	if op.GetState() != opRunning {
		return nil, nil, errdefs.New(errdefs.ErrRefused, "storage catalog: operation %s is %v, not running", opID, op.GetState())
	}
	art, err := tx.Artifact(op.GetArtifactId())
	if errors.Is(err, ErrNotFound) {
		return op, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if art.GetState() != Preparing || art.GetOperationId() != opID {
		return op, nil, nil // not this operation's record
	}
	return op, art, nil
}

// PublishArtifact completes operation opID after its staging tree was
// renamed to prepared/<artifact>: both become Published.
func (tx *Tx) PublishArtifact(opID string, rootfsBytes int64) error {
	if err := tx.writable(); err != nil {
		return err
	}
	op, art, err := tx.runningOperation(opID)
	if err != nil {
		return err
	}
	if art == nil {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: operation %s has no Preparing artifact record to publish", opID)
	}
	now := tx.now()
	op.State, op.UpdatedUnixNano = opPublished, now
	art.State, art.UpdatedUnixNano, art.RootfsBytes = Published, now, rootfsBytes
	if err := tx.set(operationKey(opID), op); err != nil {
		return err
	}
	return tx.set(artifactKey(art.GetArtifactId()), art)
}

// AbandonPreparation ends operation opID without publication, after its
// staging tree was quarantined (moved into prepared/.trash as quarantine,
// "" when no tree existed): the operation and its Preparing artifact record
// are removed. It returns the ended operation.
func (tx *Tx) AbandonPreparation(opID, quarantine string) (*v1.PreparationOperationRecordV1, error) {
	if err := tx.writable(); err != nil {
		return nil, err
	}
	op, art, err := tx.runningOperation(opID)
	if err != nil {
		return nil, err
	}
	op.QuarantineName = quarantine
	if art != nil {
		if err := tx.w.Delete(artifactKey(art.GetArtifactId()), nil); err != nil {
			return nil, err
		}
	}
	return op, tx.w.Delete(operationKey(opID), nil)
}

// Adoption records a published tree that has no record (one prepared before
// schema 2), from its validated artifact.json.
type Adoption struct {
	ArtifactID      string
	OperationID     string
	PreparerVersion string
	Source          SourceImage
	RootfsBytes     int64
}

// AdoptArtifact records a published tree with no record as Published.
func (tx *Tx) AdoptArtifact(a Adoption) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := validID("artifact ID", a.ArtifactID); err != nil {
		return err
	}
	if err := a.Source.validate(); err != nil {
		return err
	}
	if _, err := tx.Artifact(a.ArtifactID); err == nil {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s already exists", a.ArtifactID)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	now := tx.now()
	s := a.Source
	return tx.set(artifactKey(a.ArtifactID), &v1.PreparedArtifactRecordV1{RecordVersion: recordVersion, ArtifactId: a.ArtifactID,
		SourceIdentity: s.ImageName + "@" + s.ManifestDigest, PreparerVersion: a.PreparerVersion, State: Published, CreatedUnixNano: now, UpdatedUnixNano: now,
		ImageName: s.ImageName, ManifestDigest: s.ManifestDigest, ConfigDigest: s.ConfigDigest, LayerDigests: s.LayerDigests, DiffIds: s.DiffIDs,
		RootfsBytes: a.RootfsBytes, Origin: OriginAdopted, OperationId: a.OperationID})
}

// BeginReclaim moves a Published artifact to Reclaiming, naming the entry
// of prepared/.trash its tree is about to be renamed to. It is refused
// while any lease of the artifact exists.
func (tx *Tx) BeginReclaim(artifactID, trashName string) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := validID("trash name", trashName); err != nil {
		return err
	}
	art, err := tx.Artifact(artifactID)
	if err != nil {
		return err
	}
	if art.GetState() != Published {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s is %v, not Published", artifactID, art.GetState())
	}
	leases, err := tx.Leases(artifactID)
	if err != nil {
		return err
	}
	if len(leases) > 0 {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s has %d lease(s) (first: Domain %s generation %d): not reclaiming",
			artifactID, len(leases), leases[0].DomainID, leases[0].Generation)
	}
	art.State, art.UpdatedUnixNano, art.ReclaimTrashName = Reclaiming, tx.now(), trashName
	return tx.set(artifactKey(artifactID), art)
}

// RollbackReclaim returns a Reclaiming artifact whose tree provably never
// left prepared/<id> to Published.
func (tx *Tx) RollbackReclaim(artifactID string) error {
	if err := tx.writable(); err != nil {
		return err
	}
	art, err := tx.Artifact(artifactID)
	if err != nil {
		return err
	}
	if art.GetState() != Reclaiming {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s is %v, not Reclaiming", artifactID, art.GetState())
	}
	art.State, art.UpdatedUnixNano, art.ReclaimTrashName = Published, tx.now(), ""
	return tx.set(artifactKey(artifactID), art)
}

// RemoveArtifact deletes a Reclaiming artifact's record (after its tree
// left prepared/) and its finished operations. Refused with any lease or a
// running operation.
func (tx *Tx) RemoveArtifact(artifactID string) error {
	if err := tx.writable(); err != nil {
		return err
	}
	art, err := tx.Artifact(artifactID)
	if err != nil {
		return err
	}
	if art.GetState() != Reclaiming {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s is %v, not Reclaiming", artifactID, art.GetState())
	}
	leases, err := tx.Leases(artifactID)
	if err != nil {
		return err
	}
	if len(leases) > 0 {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s has %d lease(s)", artifactID, len(leases))
	}
	ops, err := tx.Operations()
	if err != nil {
		return err
	}
	for _, op := range ops {
		if op.GetArtifactId() != artifactID {
			continue
		}
		if op.GetState() == opRunning {
			return errdefs.New(errdefs.ErrRefused, "storage catalog: operation %s of artifact %s is still running", op.GetOperationId(), artifactID)
		}
		if err := tx.w.Delete(operationKey(op.GetOperationId()), nil); err != nil {
			return err
		}
	}
	return tx.w.Delete(artifactKey(artifactID), nil)
}

// ---------------------------------------------------------------------------
// Reclaim recovery.

// TreeState is what the caller observed of prepared/<id> while holding
// storage-catalog.lock.
type TreeState int

const (
	// TreeGone: prepared/<id> does not exist (the rename happened).
	TreeGone TreeState = iota + 1
	// TreeIdle: prepared/<id> exists and flock(LOCK_SH|LOCK_NB) on it
	// succeeded, so no gc holds it exclusively: no rename is in flight.
	TreeIdle
	// TreeBusy: a live gc holds prepared/<id> exclusively; it finishes.
	TreeBusy
)

// ReclaimOutcome says what RecoverReclaim did.
type ReclaimOutcome int

const (
	NotReclaiming ReclaimOutcome = iota
	Completed                    // the record was removed: the tree had left prepared/
	RolledBack                   // back to Published: the tree never left
	InFlight                     // a live gc holds the tree; nothing changed
)

func (o ReclaimOutcome) String() string {
	return [...]string{"not reclaiming", "completed", "rolled back", "in flight"}[o]
}

// RecoverReclaim deterministically finishes an interrupted reclamation of
// artifactID (a gc that died between BeginReclaim and RemoveArtifact): gc
// holds flock(LOCK_EX) on prepared/<id> from before BeginReclaim until after
// its rename, so probe's answer under storage-catalog.lock decides: gone →
// complete (remove the record), idle → roll back to Published, busy → leave
// it to the live gc.
func (tx *Tx) RecoverReclaim(artifactID string, probe func(id string) (TreeState, error)) (ReclaimOutcome, error) {
	art, err := tx.Artifact(artifactID)
	if errors.Is(err, ErrNotFound) {
		return NotReclaiming, nil
	}
	if err != nil {
		return 0, err
	}
	if art.GetState() != Reclaiming {
		return NotReclaiming, nil
	}
	st, err := probe(artifactID)
	if err != nil {
		return 0, fmt.Errorf("storage catalog: recover reclamation of %s: %w", artifactID, err)
	}
	switch st {
	case TreeGone:
		return Completed, tx.RemoveArtifact(artifactID)
	case TreeIdle:
		return RolledBack, tx.RollbackReclaim(artifactID)
	case TreeBusy:
		return InFlight, nil
	}
	return 0, errdefs.New(errdefs.ErrInternal, "storage catalog: recover reclamation of %s: tree state %d", artifactID, st)
}

// BeginReclaim moves a Published, unleased artifact to Reclaiming.
func (c *Catalog) BeginReclaim(ctx context.Context, artifactID, trashName string) error {
	return c.Update(ctx, func(tx *Tx) error { return tx.BeginReclaim(artifactID, trashName) })
}
