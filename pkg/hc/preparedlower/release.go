package preparedlower

import (
	"context"
	"errors"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/store"
)

// release is release steps 3-5 for generation gen: state_anchor Clean and
// prepared_lower ReleaseIntent once the mounts are proven absent, the
// exact catalog lease removed, prepared_lower Clean. It returns why it
// stopped, leaving every unproven record (and the lease) in place.
//
// recovering says whether the release is recovery (bootstrap, or after the
// supervisor's loss) for the model trace: its anchor mount may have died
// with the supervisor's mount namespace (RecoveryUnmountAnchor).
func (s *Service) release(ctx context.Context, gen uint64, unmounted []uint64, detail string, recovering bool) error {
	var sa, pl *store.Participant
	if err := s.cfg.Store.View(func(tx *store.Tx) error {
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
		if err := mountsAbsent(s.log, sa, unmounted); err != nil {
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
		cat, err := s.catalog()
		if err != nil {
			return err
		}
		key := s.leaseKey(gen, artifact)
		if err := cat.View(ctx, func(tx *catalog.Tx) error { _, err := tx.Lease(key); return err }); errors.Is(err, catalog.ErrNotFound) {
			return errdefs.New(errdefs.ErrCorrupt, "generation %d records prepared_lower LeaseHeld for %s, but the Storage Catalog has no lease %s: the records are kept (fail closed); inspect the Storage Root with `lazaret doctor` and report this", gen, artifact, key)
		} else if err != nil {
			return err
		}
	}
	if err := s.cfg.Store.Update(func(tx *store.Tx) error {
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
				s.emitGen(gen, artifact, "AnchorReleaseIntent", false)
			}
			if recovering {
				s.emitGen(gen, artifact, "RecoveryUnmountAnchor", true)
			}
			s.emitGen(gen, artifact, "AnchorClean", false)
		case pl.Snapshot != nil && (pl.Phase == participant.Intent || pl.Phase == participant.LeaseHeld):
			s.emitGen(gen, artifact, "ReleaseUnanchoredLower", false)
		}
		if gen == s.gen {
			s.step(func(p *steps) { p.anchor = false })
		}
	}
	failpoint.Hit("lazaret-hc:anchor-clean")
	if pl.Snapshot != nil {
		cat, err := s.catalog()
		if err != nil {
			return err
		}
		key := s.leaseKey(gen, artifact)
		res, err := cat.ReleaseLease(ctx, key, catalog.ReleaseProof{
			ReleaseIntent: func(k catalog.LeaseKey) error {
				return s.cfg.Store.View(func(tx *store.Tx) error { return tx.CheckLeaseReleaseIntent(k.Generation, k.ArtifactID) })
			},
			MountAbsent: func(catalog.LeaseKey) error {
				if proven {
					return nil
				}
				return mountsAbsent(s.log, sa, unmounted)
			},
		})
		if err != nil {
			return err
		}
		if res == catalog.Removed {
			s.emitGen(gen, artifact, "RemoveLease", false)
		}
		s.log.Info("prepared-lower lease released", "lease", key.String(), "found", res == catalog.Removed)
		failpoint.Hit("lazaret-hc:lease-released")
	}
	if err := s.cfg.Store.Update(func(tx *store.Tx) error {
		p, err := tx.Participant(gen, participant.PreparedLower)
		if err != nil {
			return err
		}
		return cleanRecorded(tx, gen, participant.PreparedLower, p, detail+"; catalog lease removed")
	}); err != nil {
		return err
	}
	if modeltrace.On() {
		s.emitGen(gen, artifact, "LowerClean", false)
		if gen == s.gen {
			s.step(func(p *steps) { p.lower = false })
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
	return tx.ReleaseAndClean(gen, role, detail, nil)
}

// Clean is normal teardown's release steps 3-5 after RS was reaped: the
// mounts RS reported unmounted and its freed mount namespace are the
// proof.
func (s *Service) Clean(rs *proc.Child) {
	if rs != nil {
		select {
		case <-rs.Done():
		default:
			s.log.Error("runtime supervisor not reaped: state anchor and prepared lower stay in release intent")
			return
		}
	}
	// A lease taken ahead (LeaseAhead) is committed or abandoned before
	// the records are read.
	s.aheadState()
	s.mu.Lock()
	unmounted := s.unmounted
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), catalog.DefaultLockTimeout)
	defer cancel()
	if err := s.release(ctx, s.gen, unmounted, "normal teardown: runtime supervisor unmounted the anchors and was reaped", s.recovering()); err != nil {
		s.log.Error("prepared-lower lease retained", "err", err)
	}
}

// Recover is bootstrap recovery's release of a dead generation's anchors
// and lease; the caller proved its RS and runsc absent first. It returns
// why the records were retained, if they were.
func (s *Service) Recover(gen uint64) []string {
	ctx, cancel := context.WithTimeout(context.Background(), catalog.DefaultLockTimeout)
	defer cancel()
	if err := s.release(ctx, gen, nil, "bootstrap recovery: the dead generation's mount namespace has no process or bind left", true); err != nil {
		return []string{err.Error()}
	}
	return nil
}

// Live reports whether gen's prepared_lower or state_anchor is not Clean
// (bootstrap recovery must reconcile it). A record this build cannot read
// (a newer build's, a corrupt one) is live: Recover reports it.
func Live(tx *store.Tx, gen uint64) bool {
	for _, role := range []participant.Role{participant.PreparedLower, participant.StateAnchor} {
		p, err := tx.Participant(gen, role)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil || p.Phase != participant.Clean:
			return true
		}
	}
	return false
}
