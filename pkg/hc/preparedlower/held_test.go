package preparedlower

import (
	"context"
	"errors"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
)

// catalogFree reports whether another catalog operation gets
// storage-catalog.lock within a short bound.
func (f *fixture) catalogFree() bool {
	f.t.Helper()
	c, err := catalog.New(f.storage, catalog.Options{Logger: discard, LockTimeout: 30 * time.Millisecond})
	if err != nil {
		f.t.Fatal(err)
	}
	err = c.View(context.Background(), func(*catalog.Tx) error { return nil })
	if err != nil && !errors.Is(err, errdefs.ErrUnavailable) {
		f.t.Fatal(err)
	}
	return err == nil
}

// openedForLease is a fixture's generation 1 whose Service opened the
// catalog for its lease (OpenForLease), once it holds the lock.
func openedForLease(t *testing.T) (*fixture, *supervisortest.Supervisor, *Service) {
	t.Helper()
	f := newFixture(t)
	sup := supervisortest.New(t)
	s := f.service(sup)
	f.begin(s, 1)
	s.OpenForLease(context.Background())
	if !eventually(func() bool { return !f.catalogFree() }) {
		t.Fatal("OpenForLease did not take storage-catalog.lock")
	}
	return f, sup, s
}

// lease delivers RS's ArtifactReady and expects the lease recorded.
func (f *fixture) lease(s *Service, sup *supervisortest.Supervisor) {
	f.t.Helper()
	sup.ArtifactReady(f.ready())
	if err := deliver(f.t, s, sup, &lv1.SupervisorHello{MountNamespace: f.held}); err != nil {
		f.t.Fatal(err)
	}
	sup.ExpectLeaseRecorded(f.art)
	if !f.leased(1) {
		f.t.Fatal("no catalog lease after LeaseRecorded")
	}
}

// eventually polls cond for up to two seconds.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestLeaseThroughOpenedCatalog: the catalog opened at the reuse verdict
// holds storage-catalog.lock until the lease; the lease takes it, with
// the same durable steps in the same order, and the lock is released
// right after.
func TestLeaseThroughOpenedCatalog(t *testing.T) {
	f, sup, s := openedForLease(t)
	f.lease(s, sup)
	f.wantActions(1, "AcquireLeaseIntent", "InsertLease", "CommitLeaseHeld", "CommitSupervisor", "AnchorIntent")
	if !eventually(f.catalogFree) {
		t.Fatal("storage-catalog.lock still held after the lease")
	}
}

// TestOpenedCatalogIsBounded: a catalog opened for a lease that does not
// come is closed after heldFor, and at once when the generation's release
// begins; a lease after the bound opens the catalog itself.
func TestOpenedCatalogIsBounded(t *testing.T) {
	defer func(d time.Duration) { heldFor = d }(heldFor)
	heldFor = 50 * time.Millisecond
	f, sup, s := openedForLease(t)
	if !eventually(f.catalogFree) {
		t.Fatalf("storage-catalog.lock held beyond %s", heldFor)
	}
	f.lease(s, sup)

	heldFor = time.Hour
	g, _, s2 := openedForLease(t)
	s2.BeginRelease()
	if !g.catalogFree() {
		t.Fatal("storage-catalog.lock held after BeginRelease")
	}
	s2.OpenForLease(context.Background())
	if !g.catalogFree() {
		t.Fatal("OpenForLease after BeginRelease took storage-catalog.lock")
	}
}
