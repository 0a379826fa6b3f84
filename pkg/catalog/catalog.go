// Package catalog is the Storage Catalog (spec §3.5, FR-17, FR-22): one
// pebble instance per Storage Root, in <StorageRoot>/catalog, shared by every
// Domain of the user. No process keeps it open. Every operation is
//
//	flock(<StorageRoot>/storage-catalog.lock)   blocking, bounded by ctx and Options.LockTimeout
//	pebble.Open(<StorageRoot>/catalog)          version key read first; newer refuses
//	one batch, committed with pebble.Sync        (or discarded on error)
//	Close, unlock
//
// A View opens pebble read-only: it writes nothing (no WAL, manifest,
// options or marker file, no directory), so the reads on the start-up path
// (preparation's reuse check) cost no fsync. A catalog that was never
// written reads as empty.
//
// so that concurrent Domain coordinators never open it at the same time and
// no handle outlives the call.
//
// # Caller contract (HC, and preparation)
//
// The §3.5 physical lease acquisition is
//
//  1. Domain Store: prepared_lower = Intent (artifact ID, lease_state=Intent)
//  2. cat.AcquireLease(ctx, catalog.LeaseKey{ArtifactID, DomainID, Generation})
//  3. Domain Store: prepared_lower = LeaseHeld
//
// and release step 4 is
//
//	cat.ReleaseLease(ctx, key, catalog.ReleaseProof{
//		ReleaseIntent: func(k LeaseKey) error { return st.View(func(tx *store.Tx) error {
//			return tx.CheckLeaseReleaseIntent(k.Generation, k.ArtifactID) }) },
//		MountAbsent:   func(k LeaseKey) error { /* re-observe the exact mount is absent */ },
//	})
//
// ReleaseLease calls both checks while it holds storage-catalog.lock and
// removes only that exact lease; a failing check refuses and retains it.
// Preparation publishes through BeginPreparation / PublishArtifact (or
// AbandonPreparation); reclamation through BeginReclaim (refused while any
// lease of the artifact exists) and RemoveArtifact.
//
// # Key schema (schema version 1)
//
// <gen> is the generation as 8 big-endian bytes; IDs are printable ASCII
// without '/'.
//
//	v                                       SchemaVersionV1               read first, written last
//	a/<artifact id>                         PreparedArtifactRecordV1      Preparing | Published | Reclaiming
//	o/<operation id>                        PreparationOperationRecordV1  Running | Published | Abandoned
//	l/<artifact id>/<domain id>/<gen>       PreparedLowerLeaseRecordV1    one generation's lease
//
// The lease key equals the (prepared-artifact ID, Domain ID, generation) of
// the Domain Store's prepared_lower participant it corresponds to. Schema
// changes follow pkg/store's discipline: an ordered migration list, each
// migration tested (TestEveryMigrationTested), version written last.
package catalog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pebbleguard"
	"github.com/lazaret/lazaret/pkg/shellquote"
)

// SchemaVersion is the catalog schema this code reads and writes.
//
// History: 1 initial (the coordinator registered artifacts on first
// lease); 2 the preparer records artifacts, their source image identity and
// a durable prepare intent itself (migration v1→v2 in migrate.go).
const SchemaVersion = 2

// FormatMajorVersion is the pinned pebble on-disk format.
const FormatMajorVersion = pebble.FormatValueSeparation

// MemTableSize and CacheSize size pebble for the Storage Catalog, which
// holds a few KiB of records and is opened for one transaction at a time.
// pebble's defaults (a 4 MiB memtable, an 8 MiB block cache) are for large
// databases, and every open allocates a memtable of that size for its WAL
// replay and another for its writes. In a fresh process that costs
// nothing until written, but in the long-lived Host Coordinator (a lease
// at start, its release at teardown) and Runtime Supervisor the runtime
// reuses freed heap for them and zeroes all of it: 4 MiB written, page
// by page, once the idle heap was given back to the kernel (package
// idlemem), a page fault each.
const (
	MemTableSize = 64 << 10
	CacheSize    = 1 << 20
)

const (
	Dir      = "catalog"
	LockName = "storage-catalog.lock"
)

// recordVersion is the record_version of every record of SchemaVersion.
const recordVersion = 2

// DefaultLockTimeout bounds the wait for storage-catalog.lock when neither
// ctx nor Options set a shorter bound.
const DefaultLockTimeout = 30 * time.Second

// Options configures a Catalog.
type Options struct {
	Logger      *slog.Logger     // nil: slog.Default()
	Now         func() time.Time // nil: time.Now
	FS          vfs.FS           // pebble files (tests); the lock is always a real file
	LockTimeout time.Duration    // 0: DefaultLockTimeout

	readObserver func(key []byte) // tests: every key read, in order
}

// Catalog names the Storage Catalog of one Storage Root. It holds no handle.
type Catalog struct {
	root string
	opts Options
}

// New returns the catalog of storageRoot, which must be an existing
// directory. It opens nothing.
func New(storageRoot string, opts Options) (*Catalog, error) {
	fi, err := os.Stat(storageRoot)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("storage catalog: %w", err), errdefs.ErrUnsupportedHost)
	}
	if !fi.IsDir() {
		return nil, errdefs.New(errdefs.ErrInvalid, "storage catalog: %s is not a directory", storageRoot)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	return &Catalog{root: storageRoot, opts: opts}, nil
}

// FatalError is the panic value of the catalog's pebble Fatalf.
type FatalError struct {
	StorageRoot string
	Operation   string
	Message     string
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("storage catalog %s (%s): pebble fatal: %s", e.StorageRoot, e.Operation, e.Message)
}

type fatalLogger struct {
	log  *slog.Logger
	root string
	op   string
}

func (l fatalLogger) attrs() []any {
	return []any{"storage_root", l.root, "operation", l.op, "component", "storage-catalog"}
}

// Infof is pebble's informational messages (WAL replay, compactions):
// internal to the storage engine, so at debug level.
func (l fatalLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), l.attrs()...)
}

func (l fatalLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), l.attrs()...)
}

// Fatalf logs and panics: pebble assumes Fatalf does not return.
func (l fatalLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble fatal: "+msg, l.attrs()...)
	panic(&FatalError{StorageRoot: l.root, Operation: l.op, Message: msg})
}

// lock takes storage-catalog.lock, waiting until ctx or the timeout ends.
func (c *Catalog) lock(ctx context.Context) (*os.File, error) {
	path := filepath.Join(c.root, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("storage catalog: open lock: %w", err), errdefs.ErrUnsupportedHost)
	}
	deadline := time.Now().Add(c.opts.LockTimeout)
	wait := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, errdefs.Mark(fmt.Errorf("storage catalog: flock %s: %w", path, err), errdefs.ErrInternal)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, errdefs.New(errdefs.ErrUnavailable, "storage catalog: %s is held by another operation for longer than %s", path, c.opts.LockTimeout)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, errdefs.Mark(fmt.Errorf("storage catalog: waiting for %s: %w", path, ctx.Err()), errdefs.ErrUnavailable)
		case <-t.C:
		}
		if wait < 20*time.Millisecond {
			wait *= 2
		}
	}
}

// Update runs fn as one catalog operation: lock, open, one synced batch
// (discarded if fn fails), close, unlock.
func (c *Catalog) Update(ctx context.Context, fn func(tx *Tx) error) error {
	return c.run(ctx, "update", true, fn)
}

// View runs fn read-only under the same lock; mutators refuse. It opens
// pebble read-only and writes nothing to the catalog's directory.
func (c *Catalog) View(ctx context.Context, fn func(tx *Tx) error) error {
	return c.run(ctx, "view", false, fn)
}

// Exclusive runs fn holding storage-catalog.lock without opening the
// catalog, so that no catalog operation runs meanwhile: `lazaret rm --all`
// moves the whole catalog aside under it. fn must be as short as a
// transaction (a few renames): every other operation waits for the lock,
// bounded by its timeout (OR-6).
func (c *Catalog) Exclusive(ctx context.Context, fn func() error) error {
	lf, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer lf.Close()
	return fn()
}

func (c *Catalog) run(ctx context.Context, op string, write bool, fn func(tx *Tx) error) (err error) {
	lf, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer lf.Close() // closing the only descriptor releases the flock
	dir := filepath.Join(c.root, Dir)
	po := &pebble.Options{
		FS:                 c.opts.FS,
		FormatMajorVersion: FormatMajorVersion,
		Logger:             fatalLogger{log: c.opts.Logger, root: c.root, op: op},
		// A flush or compaction that fails on the filesystem is fatal,
		// not retried for ever (package pebbleguard).
		EventListener: pebbleguard.Listener(fatalLogger{log: c.opts.Logger, root: c.root, op: op}),
		ReadOnly:      !write,
		MemTableSize:  MemTableSize,
		CacheSize:     CacheSize,
		// pebble keeps no table statistics on disk, so every open that
		// may write collects them anew, reading each table's properties
		// in the background, and Close waits for that. They only tune
		// which compaction reclaims tombstones first, nothing in a
		// database of a few KiB. Measured on this catalog (open, one
		// synced write, close, 40 rounds): 6.2 ms a transaction with
		// them, 4.8 without; the Domain's lease is one such transaction
		// on the start-up's critical path.
		DisableTableStats: true,
	}
	if !write {
		fs := c.opts.FS
		if fs == nil {
			// pebble's own LOCK file is created (truncated) on every
			// open; storage-catalog.lock already serializes operations.
			fs = viewFS{vfs.Default}
			po.FS = fs
		}
		if _, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) {
			// Never written: read an empty database held in memory, so
			// that a View creates nothing.
			po.FS, po.ReadOnly = vfs.NewMem(), false
		} else if err != nil {
			return errdefs.Mark(fmt.Errorf("storage catalog: %w", err), errdefs.ErrUnsupportedHost)
		}
	}
	db, err := pebble.Open(dir, po)
	if errors.Is(err, pebble.ErrDBDoesNotExist) {
		// The directory exists but holds no database (a crash between
		// its creation and the first manifest): read it as empty.
		po.FS, po.ReadOnly = vfs.NewMem(), false
		db, err = pebble.Open(dir, po)
	}
	if err != nil {
		// A catalog moved aside is recreated empty: each Domain start then
		// prepares (or records again) its image, a lease it finds absent
		// is released as such (ReleaseLease's AlreadyAbsent), and a tree in
		// use is held by its Runtime Supervisor against reclamation.
		return errdefs.Mark(fmt.Errorf("storage catalog: open: %w: the Storage Catalog at %s cannot be read; stop every Domain (`lazaret stop --all`), move it aside (`mv %s %s.broken`) and retry: each image is prepared again at its next use (or `lazaret rm --all` removes it with everything Lazaret stored)",
			err, dir, shellquote.Word(dir), shellquote.Word(dir)), errdefs.ErrCorrupt)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = errdefs.Mark(fmt.Errorf("storage catalog: close: %w", cerr), errdefs.ErrInternal)
		}
	}()
	b := db.NewIndexedBatch()
	defer b.Close()
	tx := &Tx{c: c, r: b}
	fresh, err := tx.checkVersion()
	if err != nil {
		return err
	}
	if write {
		tx.w = b
	}
	err = fn(tx)
	tx.done = true
	if err != nil {
		return err
	}
	if !write || b.Empty() {
		return nil
	}
	if fresh {
		if err := b.Set(keyVersion, mustMarshal(&v1.SchemaVersionV1{Version: SchemaVersion}), nil); err != nil { // last
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return errdefs.Mark(fmt.Errorf("storage catalog: commit: %w", err), errdefs.ErrInternal)
	}
	// The write leaves the catalog's WAL empty: the next operation that may
	// write opens it without replaying and flushing it first (pebble
	// flushes a replayed WAL inside Open, with synced writes), and that
	// next one is a Domain start's lease, on its critical path. The commit
	// is durable already; a failed flush loses nothing (the WAL is
	// replayed at the next open) and one that fails on the filesystem is
	// fatal (package pebbleguard).
	if err := db.Flush(); err != nil {
		c.opts.Logger.Warn("storage catalog: flush after the commit", "op", op, "err", err)
	}
	return nil
}

// viewFS is the host file system for a read-only View: its Lock takes
// pebble's LOCK file without creating or truncating it.
type viewFS struct{ vfs.FS }

func (v viewFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return v.FS.Lock(name)
	}
	if err != nil {
		return nil, err
	}
	spec := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &spec); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// --- keys and codec ---

var keyVersion = []byte("v")

const (
	prefixArtifact  = "a/"
	prefixOperation = "o/"
	prefixLease     = "l/"
)

func artifactKey(id string) []byte  { return []byte(prefixArtifact + id) }
func operationKey(id string) []byte { return []byte(prefixOperation + id) }
func leaseArtifactPrefix(artifact string) []byte {
	return []byte(prefixLease + artifact + "/")
}
func leaseKey(k LeaseKey) []byte {
	var g [8]byte
	binary.BigEndian.PutUint64(g[:], k.Generation)
	return append([]byte(prefixLease+k.ArtifactID+"/"+string(k.DomainID)+"/"), g[:]...)
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func corrupt(format string, args ...any) error {
	return errdefs.New(errdefs.ErrCorrupt, "storage catalog: "+format, args...)
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err) // unreachable: strings are validated ASCII
	}
	return b
}

func validID(kind, s string) error {
	if s == "" || len(s) > 128 {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: %s %q: must be 1..128 bytes", kind, s)
	}
	if s == "." || s == ".." {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: %s %q: not a name", kind, s)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e || r == '/' }) {
		return errdefs.New(errdefs.ErrInvalid, "storage catalog: %s %q: printable ASCII without '/' only", kind, s)
	}
	return nil
}

var errStop = errors.New("stop")
