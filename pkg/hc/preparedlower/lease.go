package preparedlower

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
	"github.com/lazaret/lazaret/pkg/store"
)

func plSnapshot(artifact, source string, lease lv1.LeaseState) *lv1.RoleSnapshotV1 {
	s := &lv1.PreparedLowerSnapshotV1{PreparedArtifactId: &artifact, LeaseState: &lease}
	if source != "" {
		s.SourceIdentity = &source
	}
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_PreparedLower{PreparedLower: s}}
}

func unassignedSlot() *lv1.ProcessSlotV1 {
	return &lv1.ProcessSlotV1{State: &lv1.ProcessSlotV1_Unassigned{Unassigned: &lv1.UnassignedV1{}}}
}

func saSnapshot(artifact string, ns *lv1.NamespaceIdentity, mounts *lv1.StateAnchorMountsV1) *lv1.RoleSnapshotV1 {
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_StateAnchor{StateAnchor: &lv1.StateAnchorSnapshotV1{
		PreparedArtifactId: &artifact, Daemon: unassignedSlot(), MountNamespace: ns, Mounts: mounts}}}
}

// Acquire is acquisition steps 1-4 for the artifact RS holds; it answers
// LeaseRecorded only once every step is durable.
func (s *Service) Acquire(ctx context.Context, a *lv1.ArtifactReady, hello *lv1.SupervisorHello) error {
	s.mark("lease requested")
	if err := s.recordLease(ctx, a, hello); err != nil {
		return err
	}
	return s.cfg.Send(ctx, &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_LeaseRecorded{LeaseRecorded: &lv1.LeaseRecorded{PreparedArtifactId: a.GetPreparedArtifactId()}}})
}

// recordLease makes acquisition steps 1-4 (up to state_anchor Intent) durable.
func (s *Service) recordLease(ctx context.Context, a *lv1.ArtifactReady, hello *lv1.SupervisorHello) error {
	id := a.GetPreparedArtifactId()
	if !prepared.ValidID(id) {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor names prepared artifact %q, not a prepared-artifact ID", id)
	}
	if a.GetImageRef() != s.cfg.Image {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor prepared image %q, not the configured %q", a.GetImageRef(), s.cfg.Image)
	}
	source := a.GetManifestDigest()
	// Steps 1 and 2 may have been taken ahead (LeaseAhead), which ends
	// before acquisition goes on.
	ahead := s.aheadState()
	// Acquisition is not begun, nor continued, once teardown began
	// releasing the generation (the model acquires only while Starting).
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.releasing {
		return errdefs.New(errdefs.ErrUnavailable, "the generation is being torn down: not leasing %s", id)
	}
	gen := s.gen
	key := s.leaseKey(gen, id)
	// Steps 1 and 2, or what of them was not taken ahead.
	intentAhead := ahead != nil && ahead.artifact != ""
	if intentAhead && (ahead.artifact != id || ahead.source != source) {
		return errdefs.New(errdefs.ErrUnavailable, "the runtime supervisor holds prepared artifact %s (manifest %s), but this start leased %s (manifest %s), the Storage Catalog's verdict for %s: the image changed while the Domain started; run the command again",
			id, source, ahead.artifact, ahead.source, s.cfg.Image)
	}
	if !intentAhead || !ahead.inserted {
		cat, err := s.catalog()
		if err != nil {
			return err
		}
		// The Storage Catalog is locked and opened (a few synced writes of
		// pebble's own) while step 1 commits; its one transaction, step 2,
		// waits for step 1 and inserts nothing unless it committed.
		intent := make(chan error, 1)
		inserted := make(chan error, 1)
		go func() { inserted <- s.insertLease(ctx, cat, key, source, intent) }()
		if !intentAhead {
			if err := s.commitIntent(id, source); err != nil {
				intent <- err
				<-inserted
				return err
			}
			s.mark("lease intent recorded")
			failpoint.Hit("lazaret-hc:lower-intent")
		}
		intent <- nil
		if err := <-inserted; err != nil {
			return fmt.Errorf("prepared-lower lease %s: %w", key, err)
		}
		s.mark("lease inserted into the Storage Catalog")
		failpoint.Hit("lazaret-hc:lease-acquired")
	}
	// state_anchor is recorded even without persistent paths: its mount
	// namespace is where the read-only lower is bound too.
	ns := hello.GetMountNamespace()
	if ns.GetDev() == 0 || ns.GetIno() == 0 {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor's hello names no mount namespace")
	}
	// prepared_lower LeaseHeld, RS's slot promoted to Committed and
	// state_anchor Intent in one transaction: one synced write on the
	// start-up path; a crash leaves all or none (recovery handles either).
	// RS's slot is committed before LeaseRecorded lets it create the
	// mounts: staged ownership never satisfies dependent-resource creation
	// (the model's CommitSupervisor before MountAnchor,
	// StagedOwnershipNoDependents). Its target-specific readiness is proven
	// by now: RS answered the hello under its staged identity and holds the
	// artifact it names.
	// One transaction: the model's CommitLeaseHeld, CommitSupervisor and
	// AnchorIntent, recorded before LeaseRecorded lets RS mount.
	if err := s.commitStep(func() error {
		return s.cfg.Store.Update(func(tx *store.Tx) error {
			if err := tx.PutParticipant(gen, participant.PreparedLower, participant.LeaseHeld, plSnapshot(id, source, lv1.LeaseState_LEASE_STATE_HELD)); err != nil {
				return err
			}
			if err := tx.PutParticipant(gen, participant.Sandbox, participant.Intent, &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Sandbox{Sandbox: &lv1.SandboxSnapshotV1{
				Coordinator: store.CommittedSlot(s.cfg.Coordinator), Supervisor: store.CommittedSlot(s.cfg.Supervisor()), Runsc: unassignedSlot(),
			}}}); err != nil {
				return err
			}
			if err := tx.PutParticipant(gen, participant.StateAnchor, participant.Intent, nil); err != nil {
				return err
			}
			return tx.PutParticipant(gen, participant.StateAnchor, participant.Intent, saSnapshot(id, ns, nil))
		})
	}, func(p *steps) { p.anchor = true }, "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent"); err != nil {
		return err
	}
	failpoint.Hit("lazaret-hc:lease-held")
	failpoint.Hit("lazaret-hc:anchor-intent")
	s.mu.Lock()
	s.leased = id
	s.mu.Unlock()
	return nil
}

// commitIntent is acquisition step 1: prepared_lower Intent for artifact
// id prepared from manifest source, durable (s.leaseMu held).
func (s *Service) commitIntent(id, source string) error {
	gen := s.gen
	return s.commitStep(func() error {
		return s.cfg.Store.Update(func(tx *store.Tx) error {
			if err := tx.PutParticipant(gen, participant.PreparedLower, participant.Intent, nil); err != nil {
				return err
			}
			return tx.PutParticipant(gen, participant.PreparedLower, participant.Intent, plSnapshot(id, source, lv1.LeaseState_LEASE_STATE_INTENT))
		})
	}, func(p *steps) { p.artifact, p.lower = id, true }, "AcquireLeaseIntent")
}

// insertLease is acquisition step 2: under storage-catalog.lock, the
// lease of key in one catalog transaction. The lock is taken and the
// catalog opened at once; the transaction waits for step 1's outcome on
// intent and, unless it is nil, writes nothing (the transaction is
// discarded, the catalog closed and the lock released).
func (s *Service) insertLease(ctx context.Context, cat *catalog.Catalog, key catalog.LeaseKey, source string, intent <-chan error) error {
	// The trace's InsertLease is recorded under storage-catalog.lock before
	// the lease is visible, so before it is committed: from it to the
	// commit is a failpoint.Hold section (as commitStep's), or the trace
	// could name a lease no catalog holds. It begins only after step 1
	// (and its failpoint) is passed.
	var end func()
	defer func() {
		if end != nil {
			end()
		}
	}()
	id := key.ArtifactID
	return cat.Update(ctx, func(tx *catalog.Tx) error {
		s.mark("Storage Catalog locked and open")
		if err := <-intent; err != nil {
			return err
		}
		end = failpoint.Hold()
		// A gc that died between Reclaiming and its rename would block the
		// lease: settle it first (RS holds the tree shared, so no gc is
		// mid-rename and the record rolls back to Published).
		if out, err := tx.RecoverReclaim(id, preparedcatalog.ProbeTree(s.cfg.StorageRoot)); err != nil {
			return err
		} else if out != catalog.NotReclaiming {
			s.log.Warn("recovered an interrupted reclamation before leasing", "artifact_id", id, "outcome", out.String())
			s.recordReclaim(out, id)
		}
		if err := verifyArtifact(tx, s.cfg.StorageRoot, id, source); err != nil {
			return err
		}
		if err := tx.AcquireLease(key); err != nil {
			return err
		}
		// Under storage-catalog.lock, before the lease is visible.
		s.step(nil, "InsertLease")
		return nil
	})
}

// verifyArtifact checks the artifact RS names against what its preparer
// recorded in the Storage Catalog, never trusting RS: the record exists and
// is Published, its recorded manifest digest maps to the ID and equals the
// one RS reports, and the published tree's artifact.json names the same
// manifest and configuration.
func verifyArtifact(tx *catalog.Tx, storageRoot, id, manifest string) error {
	rec, err := tx.Artifact(id)
	if errors.Is(err, catalog.ErrNotFound) {
		return errdefs.New(errdefs.ErrRefused, "prepared artifact %s is not recorded in the Storage Catalog by a preparer: not leasing it", id)
	}
	if err != nil {
		return err
	}
	if rec.GetState() != catalog.Published {
		return errdefs.New(errdefs.ErrRefused, "prepared artifact %s is %v in the Storage Catalog, not Published: not leasing it", id, rec.GetState())
	}
	md := rec.GetManifestDigest()
	if md == "" || prepared.ArtifactID(md) != id {
		return errdefs.New(errdefs.ErrRefused, "the Storage Catalog record of %s names manifest %q, which does not map to that ID", id, md)
	}
	if manifest != md {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor reports manifest %q for %s, its preparer recorded %q", manifest, id, md)
	}
	art, found, err := prepared.LookupID(storageRoot, id)
	if err != nil {
		return err
	}
	if !found {
		return errdefs.New(errdefs.ErrRefused, "prepared artifact %s is recorded Published but prepared/%s is missing", id, id)
	}
	if art.Source.ManifestDigest != md || (rec.GetConfigDigest() != "" && art.Source.ConfigDigest != rec.GetConfigDigest()) {
		return errdefs.New(errdefs.ErrRefused, "prepared/%s/artifact.json names manifest %s config %s, the Storage Catalog %s %s",
			id, art.Source.ManifestDigest, art.Source.ConfigDigest, md, rec.GetConfigDigest())
	}
	return nil
}

// AnchorsMounted is acquisition step 4's end: state_anchor = Prepared
// with the exact identity of every anchor mount RS created.
func (s *Service) AnchorsMounted(m *lv1.AnchorsMounted, hello *lv1.SupervisorHello) error {
	leased := s.Leased()
	if m.GetPreparedArtifactId() != leased || leased == "" {
		return errdefs.New(errdefs.ErrRefused, "anchors mounted over artifact %q, but the lease recorded is %q", m.GetPreparedArtifactId(), leased)
	}
	ns := m.GetMountNamespace()
	if ns == nil || hello.GetMountNamespace() == nil || !sameNamespace(ns, hello.MountNamespace) {
		return errdefs.New(errdefs.ErrRefused, "anchors mounted in mount namespace %v, not the runtime supervisor's %v", ns, hello.GetMountNamespace())
	}
	var got []string
	mounts := &lv1.StateAnchorMountsV1{MountNamespace: ns}
	for _, a := range m.GetAnchors() {
		if a.GetMountId() == 0 {
			return errdefs.New(errdefs.ErrRefused, "anchor %s without a mount ID", a.GetGuestPath())
		}
		got = append(got, a.GetGuestPath())
		mounts.Anchors = append(mounts.Anchors, &lv1.AnchorMountV1{GuestPath: a.GetGuestPath(), MountId: a.GetMountId(), Target: a.GetTarget(), Upper: a.GetUpper()})
	}
	want := slices.Clone(s.cfg.PersistentPaths)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return errdefs.New(errdefs.ErrRefused, "anchors mounted for %v, the profile's persistent paths are %v", got, want)
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.releasing {
		return errdefs.New(errdefs.ErrUnavailable, "the generation is being torn down: state_anchor stays in Intent")
	}
	if err := s.commitStep(func() error {
		return s.cfg.Store.Update(func(tx *store.Tx) error {
			return tx.PutParticipant(s.gen, participant.StateAnchor, participant.Prepared, saSnapshot(leased, ns, mounts))
		})
	}, func(p *steps) {
		for _, a := range mounts.Anchors {
			p.mounts = append(p.mounts, a.GetMountId())
		}
	}, "CommitAnchorPrepared"); err != nil {
		return err
	}
	failpoint.Hit("lazaret-hc:anchor-prepared")
	return nil
}

// Release is release step 1: state_anchor = ReleaseIntent with every
// identity kept, before RS is asked to stop. It reports whether it
// recorded it.
func (s *Service) Release() (bool, error) {
	released := false
	err := s.cfg.Store.Update(func(tx *store.Tx) error {
		var err error
		released, err = s.ReleaseTx(tx)
		return err
	})
	released = released && err == nil
	s.ReleaseRecorded(released)
	return released, err
}

// ReleaseTx is Release within tx (the teardown records every release
// intent in one transaction); once tx committed, ReleaseRecorded follows
// with what it reported.
func (s *Service) ReleaseTx(tx *store.Tx) (bool, error) {
	return tx.ReleaseHeld(s.gen, participant.StateAnchor)
}

// ReleaseRecorded follows a committed ReleaseTx that recorded the intent
// (released), or its failure or no-op (false).
func (s *Service) ReleaseRecorded(released bool) {
	if released {
		s.step(nil, "AnchorReleaseIntent")
	}
	failpoint.Hit("lazaret-hc:anchor-release-intent")
}

// mountsAbsent proves every mount of a state_anchor record absent without
// relying on process liveness: the recorded mount namespace, the only place
// the anchors and the read-only lower bind ever existed, has no process and
// no nsfs bind left (pidfs.NamespaceHolders). Mounts RS reported verified
// and unmounted are logged as the exact evidence; a namespace still held
// refuses, whatever RS reported. The recorded namespace ID decides which
// processes hold it: the kernel hands a freed namespace's inode to the next
// one, often another Domain's RS or connectivity helper. Records without
// an ID (older ones) are matched by (dev, ino).
func mountsAbsent(log *slog.Logger, sa *store.Participant, unmounted []uint64) error {
	if sa == nil || sa.Snapshot == nil || sa.Phase == participant.Clean {
		return nil // bare Intent: nothing was mounted (RS mounts only after LeaseRecorded); Clean: proven before
	}
	snap := sa.Snapshot.GetStateAnchor()
	ns := snap.GetMountNamespace()
	if ns == nil {
		return errdefs.New(errdefs.ErrRefused, "state_anchor records no mount namespace: its mounts cannot be proven absent")
	}
	var left []string
	for _, a := range snap.GetMounts().GetAnchors() {
		if !slices.Contains(unmounted, a.GetMountId()) {
			left = append(left, fmt.Sprintf("%s (mount %d)", a.GetGuestPath(), a.GetMountId()))
		}
	}
	if ns.GetMntnsId() == 0 {
		log.Debug("state_anchor records no mount namespace ID: holders matched by nsfs dev/ino only", "mntns_ino", ns.GetIno())
	}
	pids, binds, _, err := pidfs.NamespaceHolders("mnt", ns.GetDev(), ns.GetIno(), ns.GetMntnsId())
	if err != nil {
		return fmt.Errorf("observe State Anchor mount namespace %d (ID %d): %w", ns.GetIno(), ns.GetMntnsId(), err)
	}
	if len(pids) > 0 || len(binds) > 0 {
		return errdefs.New(errdefs.ErrRefused, "State Anchor mounts not proven absent (not unmounted by RS: %s): mount namespace %d (ID %d) still held by pids %v, nsfs binds %v", strings.Join(left, ", "), ns.GetIno(), ns.GetMntnsId(), pids, binds)
	}
	return nil
}
