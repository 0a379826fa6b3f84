package preparedlower

import (
	"context"
	"sync"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/ocilayout"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/preparedcatalog"
)

// LeaseAhead begins, beside RS's start, the Storage Catalog's verdict
// on the prepared artifact of the configured image a start may reuse as it
// is (StartSandbox.reusable_artifact_id), and returns a function that
// waits for it. The verdict is the artifact's ID when the catalog records
// it Published, "" otherwise — no record, a preparation or a reclamation
// to settle, an image whose manifest digest is not known without the image
// library (ocilayout.ReuseDigest, as RS reads it) — and RS then runs the
// preparer, which settles it. The catalog is read here, not in RS, so that
// RS links no database library.
//
// The verdict comes from a read-only view. Then, when it names an
// artifact whose record and tree verify (verifyArtifact, under the
// catalog's lock), the lease is taken ahead in one catalog transaction:
// acquisition steps 1 (prepared_lower Intent, committed before anything
// is inserted) and 2 (the exact catalog lease), which do not depend on
// RS. They were on the start's critical path: RS, done with its network
// checks, waited for them after naming the artifact. Acquire then takes
// only step 3 when RS names that artifact with the same manifest; an
// artifact other than the one leased ahead (the image changed during the
// start) fails the start, which a retry repairs. A failure ahead leaves
// the steps to Acquire.
//
// The verdict is returned as soon as it is read, before the steps taken
// ahead are durable: RS mounts nothing before LeaseRecorded.
func (s *Service) LeaseAhead(ctx context.Context) (verdict func() string) {
	a := &aheadLease{done: make(chan struct{}), read: make(chan struct{})}
	s.mu.Lock()
	s.ahead = a
	s.mu.Unlock()
	go func() {
		defer close(a.done)
		defer a.decide("") // unless decided
		s.leaseAhead(ctx, a)
	}()
	return func() string { <-a.read; return a.verdict }
}

// aheadLease is what LeaseAhead read and took.
type aheadLease struct {
	read    chan struct{} // closed once verdict is set
	once    sync.Once
	verdict string
	done    chan struct{} // closed once LeaseAhead ended; the fields below are set by then
	// artifact is the artifact step 1 was committed for ("" none), source
	// its manifest digest, inserted whether step 2 was committed.
	artifact, source string
	inserted         bool
}

// decide sets the verdict, once.
func (a *aheadLease) decide(v string) {
	a.once.Do(func() {
		a.verdict = v
		close(a.read)
	})
}

func (s *Service) leaseAhead(ctx context.Context, a *aheadLease) {
	d, err := ocilayout.ReuseDigest(s.cfg.Image)
	if err != nil {
		s.log.Debug("no reuse without the preparer", "image_ref", s.cfg.Image, "why", err)
		return
	}
	id := prepared.ArtifactID(d)
	cat, err := s.catalog()
	if err != nil {
		s.log.Debug("the Storage Catalog cannot be read; RS runs the preparer", "err", err)
		return
	}
	// The verdict first, from a read-only view (no synced write of
	// pebble's own; a catalog never written is read as empty and not
	// created): StartSandbox waits for it.
	if published, err := preparedcatalog.Published(ctx, cat, id); err != nil || !published {
		s.log.Debug("the Storage Catalog records no Published prepared lower; RS runs the preparer", "image_ref", s.cfg.Image, "artifact_id", id, "err", err)
		return
	}
	a.decide(id)
	var end func() // the trace's InsertLease to the commit, as insertLease's
	err = cat.Update(ctx, func(tx *catalog.Tx) error {
		s.mark("Storage Catalog locked and open ahead")
		if err := verifyArtifact(tx, s.cfg.StorageRoot, id, d); err != nil {
			s.log.Info("prepared lower not leased ahead; RS's report leases it", "artifact_id", id, "why", err)
			return nil
		}
		s.leaseMu.Lock()
		defer s.leaseMu.Unlock()
		if s.releasing {
			return nil
		}
		if err := s.commitIntent(id, d); err != nil {
			return err
		}
		a.artifact, a.source = id, d
		s.mark("lease intent recorded ahead")
		failpoint.Hit("lazaret-hc:lower-intent")
		end = failpoint.Hold()
		if err := tx.AcquireLease(s.leaseKey(s.gen, id)); err != nil {
			return err
		}
		s.step(nil, "InsertLease")
		return nil
	})
	if end != nil {
		end()
	}
	switch {
	case err != nil:
		s.log.Warn("the lease ahead failed; RS's report takes its steps", "artifact_id", id, "err", err)
	case a.artifact != "":
		a.inserted = true
		s.mark("lease inserted into the Storage Catalog ahead")
		failpoint.Hit("lazaret-hc:lease-acquired")
	default:
		s.log.Debug("no prepared lower leased ahead", "image_ref", s.cfg.Image, "artifact_id", id)
	}
}

// aheadState is LeaseAhead's lease once it ended (nil when none began).
func (s *Service) aheadState() *aheadLease {
	s.mu.Lock()
	a := s.ahead
	s.mu.Unlock()
	if a != nil {
		<-a.done
	}
	return a
}
