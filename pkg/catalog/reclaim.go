package catalog

import (
	"context"
	"errors"
)

// GCReclaimer is the Storage Catalog's part in `lazaret gc` (OR-7): the
// catalog leases decide, under storage-catalog.lock, whether a prepared
// artifact may be reclaimed. An artifact the catalog has never recorded has
// no lease. It satisfies prepare.Reclaimer.
type GCReclaimer struct {
	Catalog *Catalog
	Ctx     context.Context
}

// Leases counts the artifact's leases.
func (r GCReclaimer) Leases(id string) (int, error) {
	ls, err := r.Catalog.Leases(r.Ctx, id)
	return len(ls), err
}

// BeginReclaim moves the artifact's record to Reclaiming in one catalog
// operation, refused while any lease exists. An unrecorded artifact has
// nothing to move; one already Reclaiming (an interrupted gc) continues.
func (r GCReclaimer) BeginReclaim(id string) error {
	return r.Catalog.Update(r.Ctx, func(tx *Tx) error {
		art, err := tx.Artifact(id)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if art.GetState() == Reclaiming {
			if ls, err := tx.Leases(id); err != nil || len(ls) > 0 {
				return tx.BeginReclaim(id) // reports the lease
			}
			return nil
		}
		return tx.BeginReclaim(id)
	})
}

// Reclaimed removes the record once the tree was moved out of prepared/.
func (r GCReclaimer) Reclaimed(id string) error {
	return r.Catalog.Update(r.Ctx, func(tx *Tx) error {
		if _, err := tx.Artifact(id); errors.Is(err, ErrNotFound) {
			return nil
		}
		return tx.RemoveArtifact(id)
	})
}
