package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pebbleguard"
)

// SchemaVersion is the Domain Store schema this code reads and writes.
const SchemaVersion = 2

// FormatMajorVersion is the pinned pebble on-disk format. Raising it is a
// deliberate, reviewed change (pebble upgrades the format in place and an
// older Lazaret then refuses to open the store).
const FormatMajorVersion = pebble.FormatValueSeparation

// Dir and LockName are the store's directory and the Domain lock file, both
// directly in the Domain Root (pkg/domain Paths.LockFile).
const (
	Dir      = "store"
	LockName = "lifecycle.lock"
)

// DomainIdentity is the stored Domain identity checked on every Open (SR-11).
type DomainIdentity struct {
	ID                 domain.ID
	Profile            string
	CanonicalWorkspace string
}

// Options configures Open.
type Options struct {
	// Logger receives pebble's messages with domain_id and generation
	// attributes; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock for created/updated times; nil means time.Now.
	Now func() time.Time
	// FS replaces the real filesystem for the pebble files (tests: a
	// crashable in-memory vfs). The Domain lock is always a real file.
	FS vfs.FS

	// readObserver, when set (tests), sees every key the store reads, in
	// order, before the read.
	readObserver func(key []byte)
	// commitObserver, when set (tests), sees every batch before its commit.
	commitObserver func(b *pebble.Batch)
	// retain, when set (tests), replaces RetainedGenerations.
	retain uint64
}

// Store is an open Domain Store.
type Store struct {
	mu     sync.Mutex // serializes Update and Close
	db     *pebble.DB
	id     DomainIdentity
	now    func() time.Time
	log    *slog.Logger
	gen    *atomic.Uint64 // last generation touched, for the fatal logger
	closed bool
	obs    func([]byte)
	cobs   func(*pebble.Batch)
	retain uint64 // RetainedGenerations, or a test's window
}

// FatalError is the panic value of the store's pebble Fatalf.
type FatalError struct {
	DomainID   domain.ID
	Generation uint64
	Message    string
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("domain store %s (generation %d): pebble fatal: %s", e.DomainID, e.Generation, e.Message)
}

// fatalLogger is pebble's Logger for the store.
type fatalLogger struct {
	log    *slog.Logger
	domain domain.ID
	gen    *atomic.Uint64
}

func (l fatalLogger) attrs() []any {
	return []any{"domain_id", string(l.domain), "generation", l.gen.Load(), "component", "domain-store"}
}

// Infof is pebble's informational messages (WAL replay, compactions):
// internal to the storage engine, so at debug level.
func (l fatalLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), l.attrs()...)
}

func (l fatalLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), l.attrs()...)
}

// Fatalf records the Domain and generation, then panics: pebble assumes a
// Fatalf never returns, and Lazaret never exits silently from a library.
func (l fatalLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble fatal: "+msg, l.attrs()...)
	panic(&FatalError{DomainID: l.domain, Generation: l.gen.Load(), Message: msg})
}

// verifyLock refuses unless lock is <domainRoot>/lifecycle.lock and this
// descriptor holds its exclusive flock. flock on a descriptor that already
// holds the lock succeeds; one held through another open file description
// fails with EWOULDBLOCK.
func verifyLock(domainRoot string, lock *os.File) error {
	if lock == nil {
		return errdefs.New(errdefs.ErrRefused, "domain store: opened without the Domain lock")
	}
	var held, want unix.Stat_t
	if err := unix.Fstat(int(lock.Fd()), &held); err != nil {
		return errdefs.Mark(fmt.Errorf("domain store: fstat Domain lock: %w", err), errdefs.ErrRefused)
	}
	path := filepath.Join(domainRoot, LockName)
	if err := unix.Stat(path, &want); err != nil {
		return errdefs.Mark(fmt.Errorf("domain store: stat %s: %w", path, err), errdefs.ErrRefused)
	}
	if held.Dev != want.Dev || held.Ino != want.Ino {
		return errdefs.New(errdefs.ErrRefused, "domain store: the lock descriptor is not %s", path)
	}
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return errdefs.Mark(fmt.Errorf("domain store: this process does not hold the Domain lock %s: %w", path, err), errdefs.ErrRefused)
		}
		return nil
	}
}

// MemTableSize and CacheSize size pebble for the Domain Store, which holds
// a few KiB of records (a generation writes about 9 KiB to the WAL).
// pebble's defaults are for large databases: a 4 MiB memtable, whose WAL
// it preallocates on disk (1.1 × the memtable: 4.5 MiB in every Domain
// Root, measured 84 KiB with these sizes), and an 8 MiB block cache. A
// smaller memtable only means a flush after that many bytes of writes.
const (
	MemTableSize = 64 << 10
	CacheSize    = 1 << 20
)

// RetainedGenerations is how many of the latest generations keep their
// records whatever their state. Close forgets the records of every older
// generation at or below the recovery watermark (Tx.SettledThrough): a
// settled generation is Clean everywhere, no recovery reads it again, and
// a Domain started for every tool call of an agent harness would otherwise
// grow its store by every start (about 320 bytes) for ever — and every
// Close, whose compaction rewrites the whole store, would grow with it
// (measured: 3 ms at 25 generations, 10 ms at 1,900). A generation above
// the watermark (unsettled, or retained by recovery) is never forgotten,
// however old; the latest generation never is, so generation numbers keep
// rising.
const RetainedGenerations = 64

// Open opens the Domain Store of domainRoot for the holder of the Domain
// lock. In order: it verifies lock, opens pebble, reads the schema version
// key (and nothing else) and refuses a newer version, initializes an empty
// store or migrates an older one, then verifies the stored Domain identity
// against id. Every refusal closes pebble again.
func Open(domainRoot string, lock *os.File, id DomainIdentity, opts Options) (*Store, error) {
	if err := verifyLock(domainRoot, lock); err != nil {
		return nil, err
	}
	if !id.ID.Valid() || id.Profile == "" || id.CanonicalWorkspace == "" {
		return nil, errdefs.New(errdefs.ErrInvalid, "domain store: incomplete Domain identity %+v", id)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{id: id, now: opts.Now, log: opts.Logger, gen: new(atomic.Uint64), obs: opts.readObserver, cobs: opts.commitObserver, retain: RetainedGenerations}
	if opts.retain > 0 {
		s.retain = opts.retain
	}
	po := &pebble.Options{
		FS:                 quietFS(opts.FS),
		FormatMajorVersion: FormatMajorVersion,
		Logger:             fatalLogger{log: opts.Logger, domain: id.ID, gen: s.gen},
		// A flush or compaction that fails on the filesystem is fatal,
		// not retried for ever (package pebbleguard).
		EventListener: pebbleguard.Listener(fatalLogger{log: opts.Logger, domain: id.ID, gen: s.gen}),
		MemTableSize:  MemTableSize,
		CacheSize:     CacheSize,
		// pebble keeps no table statistics on disk and recollects them
		// after every open, from every table, in the background (Close
		// waits for it), for compaction heuristics that reclaim
		// tombstones sooner: nothing a store of a few KiB needs, and CPU
		// taken from the start-up it opens in.
		DisableTableStats: true,
	}
	po.Experimental.CompactionScheduler = newCompactionScheduler()
	db, err := pebble.Open(filepath.Join(domainRoot, Dir), po)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("domain store: open: %w", err), errdefs.ErrCorrupt)
	}
	s.db = db
	if err := s.open(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *Store) get(r pebble.Reader, key []byte) ([]byte, bool, error) {
	if s.obs != nil {
		s.obs(key)
	}
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, errdefs.Mark(fmt.Errorf("domain store: read %q: %w", key, err), errdefs.ErrCorrupt)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, true, nil
}

// scan calls fn for every key with prefix, in order.
func (s *Store) scan(r pebble.Reader, prefix []byte, fn func(k, v []byte) error) error {
	if s.obs != nil {
		s.obs(prefix)
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := fn(append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return errdefs.Mark(fmt.Errorf("domain store: scan %q: %w", prefix, err), errdefs.ErrCorrupt)
	}
	return nil
}

func readVersion(b []byte) (uint32, error) {
	var sv v1.SchemaVersionV1
	if err := unmarshal(keyVersion, b, &sv); err != nil {
		return 0, err
	}
	if sv.GetVersion() == 0 {
		return 0, corrupt("schema version 0")
	}
	return sv.GetVersion(), nil
}

func (s *Store) open() error {
	// 1. The version key, before anything else.
	vb, ok, err := s.get(s.db, keyVersion)
	if err != nil {
		return err
	}
	if !ok {
		return s.initialize()
	}
	ver, err := readVersion(vb)
	if err != nil {
		return err
	}
	if ver > SchemaVersion {
		return errdefs.New(errdefs.ErrRefused, "domain store: schema version %d is newer than this Lazaret understands (%d): upgrade Lazaret; nothing was read or changed", ver, SchemaVersion)
	}
	// 2. The Domain identity (SR-11), before anything is rewritten.
	if err := s.verifyDomain(); err != nil {
		return err
	}
	// 3. Older versions migrate step by step, each step one synced batch.
	if ver < SchemaVersion {
		if err := s.migrate(ver); err != nil {
			return err
		}
	}
	// The fatal logger names the latest generation from now on.
	tx := &Tx{s: s, r: s.db}
	latest, err := tx.LatestGeneration()
	if err != nil {
		return err
	}
	s.gen.Store(latest)
	return nil
}

func (s *Store) initialize() error {
	// A store without a version key must be empty: anything else is a store
	// this code did not write.
	nonEmpty := false
	if err := s.scan(s.db, nil, func(k, v []byte) error {
		nonEmpty = true
		return errStop
	}); err != nil && err != errStop {
		return err
	}
	if nonEmpty {
		return corrupt("records without a schema version key: refusing to interpret them")
	}
	b := s.db.NewBatch()
	defer b.Close()
	rec := &v1.DomainIdentityRecordV1{RecordVersion: recordVersion, DomainId: string(s.id.ID), Profile: s.id.Profile,
		CanonicalWorkspace: s.id.CanonicalWorkspace, CreatedUnixNano: s.now().UnixNano()}
	db, err := marshalChecked(rec)
	if err != nil {
		return err
	}
	if err := b.Set(keyDomain, db, nil); err != nil {
		return err
	}
	if err := b.Set(keyVersion, marshal(&v1.SchemaVersionV1{Version: SchemaVersion}), nil); err != nil {
		return err
	}
	return s.commit(b)
}

var errStop = errors.New("stop")

func (s *Store) verifyDomain() error {
	b, ok, err := s.get(s.db, keyDomain)
	if err != nil {
		return err
	}
	if !ok {
		return corrupt("no Domain identity record")
	}
	var rec v1.DomainIdentityRecordV1
	if err := unmarshal(keyDomain, b, &rec); err != nil {
		return err
	}
	if rec.GetRecordVersion() != recordVersion {
		return errdefs.New(errdefs.ErrRefused, "domain store: Domain identity record version %d is not %d", rec.GetRecordVersion(), recordVersion)
	}
	got := DomainIdentity{ID: domain.ID(rec.GetDomainId()), Profile: rec.GetProfile(), CanonicalWorkspace: rec.GetCanonicalWorkspace()}
	if got != s.id {
		return errdefs.New(errdefs.ErrRefused, "domain store belongs to Domain %s (profile %q, workspace %q), not %s (profile %q, workspace %q): refusing to reuse it",
			got.ID, got.Profile, got.CanonicalWorkspace, s.id.ID, s.id.Profile, s.id.CanonicalWorkspace)
	}
	return nil
}

func (s *Store) commit(b *pebble.Batch) error {
	if s.cobs != nil {
		s.cobs(b)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return errdefs.Mark(fmt.Errorf("domain store: commit: %w", err), errdefs.ErrInternal)
	}
	return nil
}

// Domain returns the verified Domain identity.
func (s *Store) Domain() DomainIdentity { return s.id }

// Update runs fn in one transaction: an indexed pebble batch (reads in fn see
// its own writes) committed with pebble.Sync when fn returns nil, discarded
// otherwise. Updates are serialized.
func (s *Store) Update(fn func(tx *Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errdefs.New(errdefs.ErrInternal, "domain store: closed")
	}
	b := s.db.NewIndexedBatch()
	defer b.Close()
	tx := &Tx{s: s, r: b, w: b}
	err := fn(tx)
	tx.done = true
	if err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	if err := s.commit(b); err != nil {
		return err
	}
	// Committed: the participant phase changes are durable now, in the
	// order the transaction wrote them (debug level; hc.log keeps them
	// when the Domain runs with LAZARET_DEBUG=1).
	for _, c := range tx.phases {
		s.log.Debug("participant phase recorded", "generation", c.gen, "participant", string(c.role), "from", string(c.from), "phase", string(c.to))
	}
	return nil
}

// View runs fn on a consistent read-only snapshot; mutators refuse.
func (s *Store) View(fn func(tx *Tx) error) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errdefs.New(errdefs.ErrInternal, "domain store: closed")
	}
	snap := s.db.NewSnapshot()
	s.mu.Unlock()
	defer snap.Close()
	tx := &Tx{s: s, r: snap}
	err := fn(tx)
	tx.done = true
	return err
}

// Close forgets the settled generations beyond the retention window
// (forgetSettled, RetainedGenerations), flushes the memtable, compacts what
// is in L0 (which drops what was forgotten) and closes pebble. The Domain
// lock stays with its holder.
//
// The flush and the compaction are for the next Open, which is on the
// cold-start path: pebble replays every WAL newer than the last flush and,
// in Open, writes what it replayed to a new L0 table (a synced sstable, a
// directory sync and a version edit) before it returns; and with two
// tables in L0 (each Close leaves one) it starts an L0 compaction as soon
// as the store opens, which rewrites the whole store (tens of KiB: the
// retention window bounds it) with its syncs beside the start-up it opens
// in. A store flushed and compacted at Close has an empty WAL to replay
// and nothing in L0; the compaction costs the teardown a few
// milliseconds, after the last session's CLI has gone. Durability does not
// depend on either: every Update was synced to the WAL when it committed,
// and a store that was not closed (a crash) is recovered from its WAL
// exactly as before. A failed compaction loses nothing (the tables stay in
// L0, and pebble compacts them later itself).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var forgetErr, flushErr, compactErr error
	if err := s.forgetSettled(); err != nil {
		forgetErr = errdefs.Mark(fmt.Errorf("domain store: forget settled generations at close: %w", err), errdefs.ErrInternal)
	}
	if err := s.db.Flush(); err != nil {
		flushErr = errdefs.Mark(fmt.Errorf("domain store: flush at close: %w", err), errdefs.ErrInternal)
	} else if err := s.compactLevel0(); err != nil {
		compactErr = errdefs.Mark(fmt.Errorf("domain store: compaction at close: %w", err), errdefs.ErrInternal)
	}
	return errors.Join(forgetErr, flushErr, compactErr, s.db.Close())
}

// forgetSettled deletes every record of the generations at or below both
// the recovery watermark and the latest generation less s.retain
// (RetainedGenerations), if any is stored. The deletion is one batch of
// range deletions, one per per-generation key prefix, committed without a
// sync: the flush that follows in Close makes it durable, and a crash
// before it only leaves the records for the next Close to forget.
func (s *Store) forgetSettled() error {
	tx := &Tx{s: s, r: s.db}
	through, err := tx.SettledThrough()
	if err != nil {
		return err
	}
	latest, err := tx.LatestGeneration()
	if err != nil || latest <= s.retain {
		return err
	}
	last := min(through, latest-s.retain)
	first, err := tx.firstGeneration()
	if err != nil || first == 0 || first > last {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	end := genBytes(last + 1)
	for _, p := range []string{prefixGeneration, prefixParticipant, prefixSession, prefixMailbox} {
		if err := b.DeleteRange([]byte(p), append([]byte(p), end...), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	s.log.Debug("settled generations forgotten", "from", first, "through", last, "settled_through", through, "latest", latest)
	return nil
}

// compactLevel0 compacts the store's whole key range when L0 holds a table,
// which moves every L0 table down to the bottom level.
func (s *Store) compactLevel0() error {
	if s.db.Metrics().Levels[0].TablesCount == 0 {
		return nil
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		return err
	}
	var first, last []byte
	if it.First() {
		first = append(first, it.Key()...)
		if it.Last() {
			last = append(last, it.Key()...)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	if first == nil || last == nil {
		return nil // only deletions: nothing the next Open reads
	}
	// The range's end is exclusive: the last key followed by a 0 byte is
	// the smallest key after it.
	return s.db.Compact(context.Background(), first, append(last, 0), false)
}

// Metrics-free accessor used by tests and status: the pebble format in use.
func (s *Store) formatMajorVersion() pebble.FormatMajorVersion { return s.db.FormatMajorVersion() }
