package hc

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
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/prepare"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/store"
)

// The prepared-lower lease and the State Anchors (spec §3.5, FR-17,
// tla/PreparedLower.tla). Acquisition, driven by RS's ArtifactReady:
//
//  1. prepared_lower = Intent{artifact, lease_state=Intent}     (Domain Store)
//  2. the exact (artifact, Domain, generation) lease            (Storage Catalog, under its lock)
//  3. prepared_lower = LeaseHeld{lease_state=Held}, and in the same
//     transaction
//  4. RS's sandbox slot Committed and state_anchor = Intent{artifact};
//     LeaseRecorded → RS mounts; AnchorsMounted →
//     state_anchor = Prepared{artifact, mounts} (the store refuses it unless
//     RS's slot is Committed)
//
// Release (teardown, and bootstrap recovery of a dead generation):
//
//  1. state_anchor = ReleaseIntent, keeping the mount and artifact identity (before RS is stopped)
//  2. RS verifies each recorded mount and unmounts it (SupervisorStopped names them)
//  3. state_anchor = Clean and prepared_lower = ReleaseIntent, in one transaction, only once
//     every mount is proven absent: RS reported it unmounted, or RS's mount namespace has
//     no process and no nsfs bind left (pidfs.NamespaceHolders) — never "RS died"
//  4. the catalog removes exactly that lease under storage-catalog.lock, after rechecking
//     the Domain's ReleaseIntent and the mount absence
//  5. prepared_lower = Clean
//
// The loss-of-coordinator split: an RS whose coordinator is gone unmounts
// and exits without opening either store (pkg/rs); only a lock-holding HC
// (this one, or the next one's bootstrap recovery) releases the lease. Any
// mismatch or missing evidence retains the records and the lease.

// storageCatalog returns the Storage Catalog of this Domain's Storage Root.
func (c *coordinator) storageCatalog() (*catalog.Catalog, error) {
	return catalog.New(c.paths.StorageRoot, catalog.Options{Logger: c.log})
}

func (c *coordinator) leaseKey(gen uint64, artifact string) catalog.LeaseKey {
	return catalog.LeaseKey{ArtifactID: artifact, DomainID: c.paths.ID, Generation: gen}
}

func plSnapshot(artifact, source string, lease lv1.LeaseState) *lv1.RoleSnapshotV1 {
	s := &lv1.PreparedLowerSnapshotV1{PreparedArtifactId: &artifact, LeaseState: &lease}
	if source != "" {
		s.SourceIdentity = &source
	}
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_PreparedLower{PreparedLower: s}}
}

func saSnapshot(artifact string, ns *lv1.NamespaceIdentity, mounts *lv1.StateAnchorMountsV1) *lv1.RoleSnapshotV1 {
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_StateAnchor{StateAnchor: &lv1.StateAnchorSnapshotV1{
		PreparedArtifactId: &artifact, Daemon: unassignedSlot(), MountNamespace: ns, Mounts: mounts}}}
}

// acquireLower is acquisition steps 1-4 for the artifact RS holds; it
// answers LeaseRecorded only once every step is durable.
func (c *coordinator) acquireLower(ctx context.Context, a *lv1.ArtifactReady, hello *lv1.SupervisorHello) error {
	if err := c.recordLease(ctx, a, hello); err != nil {
		return err
	}
	return c.rsChan.Send(ctx, &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_LeaseRecorded{LeaseRecorded: &lv1.LeaseRecorded{PreparedArtifactId: a.GetPreparedArtifactId()}}})
}

// recordLease makes acquisition steps 1-4 (up to state_anchor Intent) durable.
func (c *coordinator) recordLease(ctx context.Context, a *lv1.ArtifactReady, hello *lv1.SupervisorHello) error {
	id := a.GetPreparedArtifactId()
	if !prepare.ValidID(id) {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor names prepared artifact %q, not a prepared-artifact ID", id)
	}
	if a.GetImageRef() != c.image {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor prepared image %q, not the configured %q", a.GetImageRef(), c.image)
	}
	source := a.GetManifestDigest()
	// Acquisition is not begun, nor continued, once teardown began
	// releasing the generation (the model acquires only while Starting).
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	if c.pl.releasing {
		return errdefs.New(errdefs.ErrUnavailable, "the generation is being torn down: not leasing %s", id)
	}
	if err := c.store.Update(func(tx *store.Tx) error {
		if err := tx.PutParticipant(c.generation, participant.PreparedLower, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutParticipant(c.generation, participant.PreparedLower, participant.Intent, plSnapshot(id, source, lv1.LeaseState_LEASE_STATE_INTENT))
	}); err != nil {
		return err
	}
	c.plStep(func(p *plSteps) { p.artifact, p.lower = id, true }, "AcquireLeaseIntent")
	failpoint.Hit("lazaret-hc:lower-intent")
	cat, err := c.storageCatalog()
	if err != nil {
		return err
	}
	key := c.leaseKey(c.generation, id)
	if err := cat.Update(ctx, func(tx *catalog.Tx) error {
		// A gc that died between Reclaiming and its rename would block the
		// lease: settle it first (RS holds the tree shared, so no gc is
		// mid-rename and the record rolls back to Published).
		if out, err := tx.RecoverReclaim(id, prepare.ProbeTree(c.paths.StorageRoot)); err != nil {
			return err
		} else if out != catalog.NotReclaiming {
			c.log.Warn("recovered an interrupted reclamation before leasing", "artifact_id", id, "outcome", out.String())
			c.plArtifact(out, id)
		}
		if err := verifyArtifact(tx, c.paths.StorageRoot, id, source); err != nil {
			return err
		}
		if err := tx.AcquireLease(key); err != nil {
			return err
		}
		// Under storage-catalog.lock, before the lease is visible.
		c.plStep(nil, "InsertLease")
		return nil
	}); err != nil {
		return fmt.Errorf("prepared-lower lease %s: %w", key, err)
	}
	failpoint.Hit("lazaret-hc:lease-acquired")
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
	if err := c.store.Update(func(tx *store.Tx) error {
		if err := tx.PutParticipant(c.generation, participant.PreparedLower, participant.LeaseHeld, plSnapshot(id, source, lv1.LeaseState_LEASE_STATE_HELD)); err != nil {
			return err
		}
		if err := tx.PutParticipant(c.generation, participant.Sandbox, participant.Intent, sandboxSnapshot(&lv1.SandboxSnapshotV1{
			Coordinator: store.CommittedSlot(c.self), Supervisor: store.CommittedSlot(c.rsChild.Identity()), Runsc: unassignedSlot(),
		})); err != nil {
			return err
		}
		if err := tx.PutParticipant(c.generation, participant.StateAnchor, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutParticipant(c.generation, participant.StateAnchor, participant.Intent, saSnapshot(id, ns, nil))
	}); err != nil {
		return err
	}
	// One transaction: the model's CommitLeaseHeld, CommitSupervisor and
	// AnchorIntent, recorded before LeaseRecorded lets RS mount.
	c.plStep(func(p *plSteps) { p.anchor = true }, "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent")
	failpoint.Hit("lazaret-hc:lease-held")
	failpoint.Hit("lazaret-hc:anchor-intent")
	c.mu.Lock()
	c.leasedArtifact = id
	c.mu.Unlock()
	return nil
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
	if md == "" || prepare.ArtifactID(md) != id {
		return errdefs.New(errdefs.ErrRefused, "the Storage Catalog record of %s names manifest %q, which does not map to that ID", id, md)
	}
	if manifest != md {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor reports manifest %q for %s, its preparer recorded %q", manifest, id, md)
	}
	art, found, err := prepare.LookupID(storageRoot, id)
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

// recordAnchorsMounted is acquisition step 4's end: state_anchor =
// Prepared with the exact identity of every anchor mount RS created.
func sameNamespace(a, b *lv1.NamespaceIdentity) bool {
	return a.GetDev() == b.GetDev() && a.GetIno() == b.GetIno() && a.GetMntnsId() == b.GetMntnsId()
}

// verifyMountNamespace checks the mount namespace RS reports in its hello
// against the one its exact pidfd shows (PIDFD_GET_MNT_NAMESPACE): nsfs
// (dev, ino) and the never-reused ID the holder scan of mountsAbsent will
// compare. A kernel without NS_GET_MNTNS_ID reports no ID on either side.
func verifyMountNamespace(h *pidfs.Handle, reported *lv1.NamespaceIdentity) error {
	dev, ino, id, err := h.MountNamespace()
	if err != nil {
		return fmt.Errorf("read runtime supervisor mount namespace through its pidfd: %w", err)
	}
	if got := (&lv1.NamespaceIdentity{Dev: dev, Ino: ino, MntnsId: &id}); reported.GetDev() == 0 || !sameNamespace(reported, got) {
		return errdefs.New(errdefs.ErrRefused, "runtime supervisor reports mount namespace %d:%d (ID %d) but its pidfd shows %d:%d (ID %d)",
			reported.GetDev(), reported.GetIno(), reported.GetMntnsId(), dev, ino, id)
	}
	return nil
}

func (c *coordinator) recordAnchorsMounted(m *lv1.AnchorsMounted, hello *lv1.SupervisorHello) error {
	c.mu.Lock()
	leased := c.leasedArtifact
	c.mu.Unlock()
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
	want := slices.Clone(c.profile.PersistentPaths)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		return errdefs.New(errdefs.ErrRefused, "anchors mounted for %v, the profile's persistent paths are %v", got, want)
	}
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	if c.pl.releasing {
		return errdefs.New(errdefs.ErrUnavailable, "the generation is being torn down: state_anchor stays in Intent")
	}
	if err := c.store.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(c.generation, participant.StateAnchor, participant.Prepared, saSnapshot(leased, ns, mounts))
	}); err != nil {
		return err
	}
	c.plStep(func(p *plSteps) {
		for _, a := range mounts.Anchors {
			p.mounts = append(p.mounts, a.GetMountId())
		}
	}, "CommitAnchorPrepared")
	failpoint.Hit("lazaret-hc:anchor-prepared")
	return nil
}

// releaseAnchorIntent is release step 1: state_anchor = ReleaseIntent with
// every identity kept, before RS is asked to stop. It reports whether it
// recorded it.
func (c *coordinator) releaseAnchorIntent() (bool, error) {
	released := false
	err := c.store.Update(func(tx *store.Tx) error {
		p, err := tx.Participant(c.generation, participant.StateAnchor)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil || p.Phase == participant.ReleaseIntent || p.Phase == participant.Clean || p.Snapshot == nil {
			return err
		}
		released = true
		return tx.ReleaseParticipant(c.generation, participant.StateAnchor)
	})
	return released && err == nil, err
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

// releaseLower is release steps 3-5 for generation gen: state_anchor Clean
// and prepared_lower ReleaseIntent once the mounts are proven absent, the
// exact catalog lease removed, prepared_lower Clean. It returns why it
// stopped, leaving every unproven record (and the lease) in place.
//
// recovering says whether the release is recovery (bootstrap, or after the
// supervisor's loss) for the model trace: its anchor mount may have died
// with the supervisor's mount namespace (RecoveryUnmountAnchor).
func (c *coordinator) releaseLower(ctx context.Context, gen uint64, unmounted []uint64, detail string, recovering bool) error {
	var sa, pl *store.Participant
	if err := c.store.View(func(tx *store.Tx) error {
		var err error
		if sa, err = tx.Participant(gen, participant.StateAnchor); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if pl, err = tx.Participant(gen, participant.PreparedLower); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	if pl == nil || pl.Phase == participant.Clean {
		return nil
	}
	// proven: the mount namespace was observed freed. A freed namespace
	// never lives again, but its nsfs inode number may be given to a new
	// namespace at once (another Domain's, a helper's), so the catalog's
	// proof below reuses this observation instead of scanning again and
	// mistaking an unrelated process for a holder.
	proven := false
	if sa != nil && sa.Phase != participant.Clean {
		if err := mountsAbsent(c.log, sa, unmounted); err != nil {
			return err
		}
		proven = true
	}
	// A LeaseHeld record must match an exact catalog lease (the model's
	// LeaseHeldRecordMatchesCatalog). Only a record already in
	// ReleaseIntent may find its lease gone (a crash after the catalog
	// removal); a LeaseHeld record without one is an inconsistency, and
	// recovery fails closed, keeping every record.
	if pl.Phase == participant.LeaseHeld && pl.Snapshot != nil {
		artifact := pl.Snapshot.GetPreparedLower().GetPreparedArtifactId()
		cat, err := c.storageCatalog()
		if err != nil {
			return err
		}
		key := c.leaseKey(gen, artifact)
		if err := cat.View(ctx, func(tx *catalog.Tx) error { _, err := tx.Lease(key); return err }); errors.Is(err, catalog.ErrNotFound) {
			return errdefs.New(errdefs.ErrCorrupt, "generation %d records prepared_lower LeaseHeld for %s, but the Storage Catalog has no lease %s: the records are kept (fail closed); inspect the Storage Root with `lazaret doctor` and report this", gen, artifact, key)
		} else if err != nil {
			return err
		}
	}
	if err := c.store.Update(func(tx *store.Tx) error {
		if sa != nil && sa.Phase != participant.Clean {
			if err := cleanRecorded(tx, gen, participant.StateAnchor, sa, detail); err != nil {
				return err
			}
		}
		if pl.Snapshot != nil && pl.Phase != participant.ReleaseIntent {
			return tx.ReleaseParticipant(gen, participant.PreparedLower)
		}
		return nil
	}); err != nil {
		return err
	}
	artifact := pl.Snapshot.GetPreparedLower().GetPreparedArtifactId()
	if modeltrace.On() {
		// One transaction: in the model, the anchor's release intent (if
		// not recorded before), the recovery's unmount (its mount
		// namespace is proven gone), and the anchor's Clean with the
		// lower's release intent.
		switch {
		case sa != nil && sa.Phase != participant.Clean && pl.Phase != participant.ReleaseIntent:
			if sa.Phase == participant.Intent || sa.Phase == participant.Prepared {
				c.plGen(gen, artifact, "AnchorReleaseIntent", false)
			}
			if recovering {
				c.plGen(gen, artifact, "RecoveryUnmountAnchor", true)
			}
			c.plGen(gen, artifact, "AnchorClean", false)
		case pl.Snapshot != nil && (pl.Phase == participant.Intent || pl.Phase == participant.LeaseHeld):
			c.plGen(gen, artifact, "ReleaseUnanchoredLower", false)
		}
		if gen == c.generation {
			c.plStep(func(p *plSteps) { p.anchor = false })
		}
	}
	failpoint.Hit("lazaret-hc:anchor-clean")
	if pl.Snapshot != nil {
		artifact := pl.Snapshot.GetPreparedLower().GetPreparedArtifactId()
		cat, err := c.storageCatalog()
		if err != nil {
			return err
		}
		key := c.leaseKey(gen, artifact)
		res, err := cat.ReleaseLease(ctx, key, catalog.ReleaseProof{
			ReleaseIntent: func(k catalog.LeaseKey) error {
				return c.store.View(func(tx *store.Tx) error { return tx.CheckLeaseReleaseIntent(k.Generation, k.ArtifactID) })
			},
			MountAbsent: func(catalog.LeaseKey) error {
				if proven {
					return nil
				}
				return mountsAbsent(c.log, sa, unmounted)
			},
		})
		if err != nil {
			return err
		}
		if res == catalog.Removed {
			c.plGen(gen, artifact, "RemoveLease", false)
		}
		c.log.Info("prepared-lower lease released", "lease", key.String(), "found", res == catalog.Removed)
		failpoint.Hit("lazaret-hc:lease-released")
	}
	if err := c.store.Update(func(tx *store.Tx) error {
		p, err := tx.Participant(gen, participant.PreparedLower)
		if err != nil {
			return err
		}
		return cleanRecorded(tx, gen, participant.PreparedLower, p, detail+"; catalog lease removed")
	}); err != nil {
		return err
	}
	if modeltrace.On() {
		c.plGen(gen, artifact, "LowerClean", false)
		if gen == c.generation {
			c.plStep(func(p *plSteps) { p.lower = false })
		}
	}
	return nil
}

// cleanRecorded records role Clean with a proof covering every recorded
// field (neither role has a recorded process).
func cleanRecorded(tx *store.Tx, gen uint64, role participant.Role, p *store.Participant, detail string) error {
	for _, sl := range p.View.Slots {
		if sl.State != participant.Unassigned {
			return errdefs.New(errdefs.ErrRefused, "participant %s of generation %d records a process (%s): not proven absent", role, gen, sl)
		}
	}
	return releaseAndCleanTx(tx, gen, role, p, detail, nil)
}

// finishLower is normal teardown's release steps 3-5 after RS was reaped.
func (c *coordinator) finishLower(rs *proc.Child) {
	if rs != nil {
		select {
		case <-rs.Done():
		default:
			c.log.Error("runtime supervisor not reaped: state anchor and prepared lower stay in release intent")
			return
		}
	}
	c.mu.Lock()
	unmounted := c.anchorsUnmounted
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), catalog.DefaultLockTimeout)
	defer cancel()
	if err := c.releaseLower(ctx, c.generation, unmounted, "normal teardown: runtime supervisor unmounted the anchors and was reaped", c.plRecovering()); err != nil {
		c.log.Error("prepared-lower lease retained", "err", err)
	}
}

// recoverLower is bootstrap recovery's release of a dead generation's
// anchors and lease; the caller proved its RS and runsc absent first.
func (c *coordinator) recoverLower(g uint64) []string {
	ctx, cancel := context.WithTimeout(context.Background(), catalog.DefaultLockTimeout)
	defer cancel()
	if err := c.releaseLower(ctx, g, nil, "bootstrap recovery: the dead generation's mount namespace has no process or bind left", true); err != nil {
		return []string{err.Error()}
	}
	return nil
}

// leaseLive reports whether gen's prepared_lower or state_anchor is not
// Clean (bootstrap recovery must reconcile it).
func leaseLive(tx *store.Tx, gen uint64) bool {
	for _, role := range []participant.Role{participant.PreparedLower, participant.StateAnchor} {
		if p, err := tx.Participant(gen, role); err == nil && p.Phase != participant.Clean {
			return true
		}
	}
	return false
}
