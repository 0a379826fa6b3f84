package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// ErrNotFound marks a read of a record that does not exist (errors.Is).
var ErrNotFound = errors.New("not found")

// migration rewrites schema version from into to within one batch; the
// version key is written last. TestEveryMigrationTested fails for any entry
// without a test case.
type migration struct {
	from, to uint32
	name     string
	apply    func(tx *Tx) error
}

// Tx is one catalog operation's transaction.
type Tx struct {
	c    *Catalog
	r    pebble.Reader
	w    *pebble.Batch
	done bool
}

// checkVersion reads the version key and nothing else before refusing a
// newer schema. It reports whether the catalog is fresh (empty).
func (tx *Tx) checkVersion() (fresh bool, err error) {
	b, ok, err := tx.get(keyVersion)
	if err != nil {
		return false, err
	}
	if !ok {
		empty := true
		if err := tx.scan(nil, func(k, v []byte) error { empty = false; return errStop }); err != nil && err != errStop {
			return false, err
		}
		if !empty {
			return false, corrupt("records without a schema version key: refusing to interpret them")
		}
		return true, nil
	}
	var sv v1.SchemaVersionV1
	if err := proto.Unmarshal(b, &sv); err != nil || sv.GetVersion() == 0 {
		return false, corrupt("malformed schema version")
	}
	if sv.GetVersion() > SchemaVersion {
		return false, errdefs.New(errdefs.ErrRefused, "storage catalog: schema version %d is newer than this Lazaret understands (%d): upgrade Lazaret; nothing was read or changed", sv.GetVersion(), SchemaVersion)
	}
	if sv.GetVersion() < SchemaVersion {
		return false, tx.migrate(sv.GetVersion())
	}
	return false, nil
}

// migrate applies the ordered migrations. It runs inside the operation's
// batch; the version key is written last.
func (tx *Tx) migrate(from uint32) error {
	ver := from
	for _, m := range migrations {
		if m.from != ver {
			continue
		}
		if err := m.apply(tx); err != nil {
			return fmt.Errorf("storage catalog: migration %s: %w", m.name, err)
		}
		ver = m.to
	}
	if ver != SchemaVersion {
		return corrupt("no migration path from schema version %d to %d", from, SchemaVersion)
	}
	b, ok := tx.r.(*pebble.Batch)
	if !ok {
		return errdefs.New(errdefs.ErrInternal, "storage catalog: migration without a batch")
	}
	return b.Set(keyVersion, mustMarshal(&v1.SchemaVersionV1{Version: SchemaVersion}), nil)
}

func (tx *Tx) get(key []byte) ([]byte, bool, error) {
	if tx.done {
		return nil, false, errdefs.New(errdefs.ErrInternal, "storage catalog: transaction used after it ended")
	}
	if tx.c.opts.readObserver != nil {
		tx.c.opts.readObserver(key)
	}
	v, closer, err := tx.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errdefs.Mark(fmt.Errorf("storage catalog: read: %w", err), errdefs.ErrCorrupt)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, true, nil
}

func (tx *Tx) scan(prefix []byte, fn func(k, v []byte) error) error {
	if tx.c.opts.readObserver != nil {
		tx.c.opts.readObserver(prefix)
	}
	it, err := tx.r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

func (tx *Tx) writable() error {
	if tx.done {
		return errdefs.New(errdefs.ErrInternal, "storage catalog: transaction used after it ended")
	}
	if tx.w == nil {
		return errdefs.New(errdefs.ErrInternal, "storage catalog: write in a read-only View")
	}
	return nil
}

func (tx *Tx) set(key []byte, m proto.Message) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: encode: %v", err)
	}
	return tx.w.Set(key, b, nil)
}

func (tx *Tx) decode(key, b []byte, m proto.Message, version func() uint32) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return corrupt("record %q: %v", key, err)
	}
	if v := version(); v != recordVersion {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: record %q has record_version %d, this Lazaret reads %d", key, v, recordVersion)
	}
	return nil
}

func (tx *Tx) now() int64 { return tx.c.opts.Now().UnixNano() }

// ---------------------------------------------------------------------------
// Leases.

// LeaseKey is the exact (prepared-artifact ID, Domain ID, generation) of one
// generation's lease; it names the same generation's prepared_lower.
type LeaseKey struct {
	ArtifactID string
	DomainID   domain.ID
	Generation uint64
}

func (k LeaseKey) String() string {
	return fmt.Sprintf("%s/%s/%d", k.ArtifactID, k.DomainID, k.Generation)
}

func (k LeaseKey) validate() error {
	if err := validID("artifact ID", k.ArtifactID); err != nil {
		return err
	}
	if !k.DomainID.Valid() {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: Domain ID %q", k.DomainID)
	}
	if k.Generation == 0 {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: generation 0")
	}
	return nil
}

// Lease is a stored lease.
type Lease struct {
	LeaseKey
	Acquired time.Time
}

func (tx *Tx) decodeLease(k, b []byte) (Lease, error) {
	var rec v1.PreparedLowerLeaseRecordV1
	if err := tx.decode(k, b, &rec, rec.GetRecordVersion); err != nil {
		return Lease{}, err
	}
	l := Lease{LeaseKey: LeaseKey{ArtifactID: rec.GetArtifactId(), DomainID: domain.ID(rec.GetDomainId()), Generation: rec.GetGeneration()},
		Acquired: time.Unix(0, rec.GetAcquiredUnixNano())}
	if string(leaseKey(l.LeaseKey)) != string(k) {
		return Lease{}, corrupt("lease record %q names %s", k, l.LeaseKey)
	}
	return l, nil
}

// Lease reports whether the exact lease exists.
func (tx *Tx) Lease(k LeaseKey) (*Lease, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	key := leaseKey(k)
	b, ok, err := tx.get(key)
	if err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("storage catalog: lease %s: %w", k, ErrNotFound)
		}
		return nil, err
	}
	l, err := tx.decodeLease(key, b)
	return &l, err
}

// Leases lists the leases of one artifact.
func (tx *Tx) Leases(artifactID string) ([]Lease, error) {
	if err := validID("artifact ID", artifactID); err != nil {
		return nil, err
	}
	var out []Lease
	err := tx.scan(leaseArtifactPrefix(artifactID), func(k, b []byte) error {
		l, err := tx.decodeLease(k, b)
		out = append(out, l)
		return err
	})
	return out, err
}

// AllLeases lists every lease (for recovery and status).
func (tx *Tx) AllLeases() ([]Lease, error) {
	var out []Lease
	err := tx.scan([]byte(prefixLease), func(k, b []byte) error {
		l, err := tx.decodeLease(k, b)
		out = append(out, l)
		return err
	})
	return out, err
}

// AcquireLease inserts the exact lease (§3.5 acquisition step 2). The
// artifact must be Published. Acquiring an existing exact lease again is a
// no-op, so a retry after a crash between steps 2 and 3 converges.
func (tx *Tx) AcquireLease(k LeaseKey) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := k.validate(); err != nil {
		return err
	}
	art, err := tx.Artifact(k.ArtifactID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return errdefs.Mark(err, errdefs.ErrRefused)
		}
		return err
	}
	if art.GetState() != Published {
		return errdefs.New(errdefs.ErrRefused, "storage catalog: artifact %s is %v, not Published: no lease", k.ArtifactID, art.GetState())
	}
	if _, err := tx.Lease(k); err == nil {
		return nil
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	return tx.set(leaseKey(k), &v1.PreparedLowerLeaseRecordV1{RecordVersion: recordVersion, ArtifactId: k.ArtifactID,
		DomainId: string(k.DomainID), Generation: k.Generation, AcquiredUnixNano: tx.now()})
}

// ReleaseProof carries the caller's rechecks for §3.5 release step 4. Both
// run while storage-catalog.lock is held, before anything is removed.
type ReleaseProof struct {
	// ReleaseIntent re-reads the Domain Store and returns nil only if that
	// exact generation's prepared_lower is ReleaseIntent for the artifact
	// (store.Tx.CheckLeaseReleaseIntent).
	ReleaseIntent func(LeaseKey) error
	// MountAbsent re-observes that the exact State Anchor mount that used the
	// artifact is absent.
	MountAbsent func(LeaseKey) error
}

// ReleaseResult says what ReleaseLease found.
type ReleaseResult int

const (
	// Removed: the exact lease existed and is gone.
	Removed ReleaseResult = iota + 1
	// AlreadyAbsent: there was no such lease; the Domain may record Clean.
	AlreadyAbsent
)

// ReleaseLease removes exactly the lease k after both rechecks of proof pass
// (§3.5 release step 4). A missing or failing check refuses and retains the
// lease.
func (tx *Tx) ReleaseLease(k LeaseKey, proof ReleaseProof) (ReleaseResult, error) {
	if err := tx.writable(); err != nil {
		return 0, err
	}
	if err := k.validate(); err != nil {
		return 0, err
	}
	if proof.ReleaseIntent == nil || proof.MountAbsent == nil {
		return 0, errdefs.New(errdefs.ErrRefused, "storage catalog: release of %s without the release-intent and mount-absence rechecks", k)
	}
	if err := proof.ReleaseIntent(k); err != nil {
		return 0, errdefs.Mark(fmt.Errorf("storage catalog: release of %s: Domain release intent: %w", k, err), errdefs.ErrRefused)
	}
	if err := proof.MountAbsent(k); err != nil {
		return 0, errdefs.Mark(fmt.Errorf("storage catalog: release of %s: mount absence: %w", k, err), errdefs.ErrRefused)
	}
	if _, err := tx.Lease(k); errors.Is(err, ErrNotFound) {
		return AlreadyAbsent, nil
	} else if err != nil {
		return 0, err
	}
	return Removed, tx.w.Delete(leaseKey(k), nil)
}

// ---------------------------------------------------------------------------
// One-call operations (each is one catalog operation).

// AcquireLease is §3.5 acquisition step 2 as one catalog operation.
func (c *Catalog) AcquireLease(ctx context.Context, k LeaseKey) error {
	return c.Update(ctx, func(tx *Tx) error { return tx.AcquireLease(k) })
}

// ReleaseLease is §3.5 release step 4 as one catalog operation.
func (c *Catalog) ReleaseLease(ctx context.Context, k LeaseKey, proof ReleaseProof) (ReleaseResult, error) {
	var res ReleaseResult
	err := c.Update(ctx, func(tx *Tx) error {
		var err error
		res, err = tx.ReleaseLease(k, proof)
		return err
	})
	return res, err
}

// Leases lists one artifact's leases.
func (c *Catalog) Leases(ctx context.Context, artifactID string) ([]Lease, error) {
	var out []Lease
	err := c.View(ctx, func(tx *Tx) error {
		var err error
		out, err = tx.Leases(artifactID)
		return err
	})
	return out, err
}
