package catalog

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

type crashRecorder struct {
	mem       *vfs.MemFS
	armed     atomic.Bool
	completed atomic.Int64
	mu        sync.Mutex
	points    []crashPoint
}

type crashPoint struct {
	fs        *vfs.MemFS
	completed int64
}

func (c *crashRecorder) String() string { return "crash-recorder" }

func (c *crashRecorder) MaybeError(op errorfs.Op) error {
	if !c.armed.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.points = append(c.points, crashPoint{fs: c.mem.CrashClone(vfs.CrashCloneCfg{}), completed: c.completed.Load()})
	return nil
}

func fixedClock() func() time.Time {
	t := time.Unix(1_800_000_000, 0)
	return func() time.Time { t = t.Add(time.Second); return t }
}

func rawDump(t *testing.T, root string, fs vfs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	if _, err := fs.Stat(filepath.Join(root, Dir)); err != nil {
		return out // crashed before the catalog directory was durable
	}
	db, err := pebble.Open(filepath.Join(root, Dir), &pebble.Options{FS: fs, FormatMajorVersion: FormatMajorVersion, Logger: fatalLogger{log: quiet()}})
	if err != nil {
		t.Fatalf("open crash clone: %v", err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	it.Close()
	return out
}

func equalDump(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestCrashDuringOperations: a crash clone before every filesystem
// operation of a sequence of catalog operations reopens to the state after
// the last operation that returned or after the one in flight, and the
// catalog keeps working on it.
func TestCrashDuringOperations(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("a long test: make unit and make test run it, make check (-short) does not (with CI set, -short runs it too)")
	}
	ctx := context.Background()
	always := func(LeaseKey) error { return nil }
	k1 := LeaseKey{ArtifactID: "pl-1", DomainID: domA, Generation: 1}
	k2 := LeaseKey{ArtifactID: "pl-1", DomainID: domB, Generation: 2}
	ops := []func(c *Catalog) error{
		func(c *Catalog) error {
			return c.Update(ctx, func(tx *Tx) error {
				return tx.BeginPreparation(prep("op-1", "pl-1", "x", domA, 1))
			})
		},
		func(c *Catalog) error {
			return c.Update(ctx, func(tx *Tx) error { return tx.PublishArtifact("op-1", 10) })
		},
		func(c *Catalog) error { return c.AcquireLease(ctx, k1) },
		func(c *Catalog) error { return c.AcquireLease(ctx, k2) },
		func(c *Catalog) error {
			_, err := c.ReleaseLease(ctx, k1, ReleaseProof{ReleaseIntent: always, MountAbsent: always})
			return err
		},
		func(c *Catalog) error {
			_, err := c.ReleaseLease(ctx, k2, ReleaseProof{ReleaseIntent: always, MountAbsent: always})
			return err
		},
		func(c *Catalog) error { return c.BeginReclaim(ctx, "pl-1", "pl-1.1") },
		func(c *Catalog) error { return c.Update(ctx, func(tx *Tx) error { return tx.RollbackReclaim("pl-1") }) },
		func(c *Catalog) error { return c.BeginReclaim(ctx, "pl-1", "pl-1.2") },
		func(c *Catalog) error {
			return c.Update(ctx, func(tx *Tx) error {
				_, err := tx.RecoverReclaim("pl-1", func(string) (TreeState, error) { return TreeGone, nil })
				return err
			})
		},
		func(c *Catalog) error {
			return c.Update(ctx, func(tx *Tx) error { return tx.BeginPreparation(prep("op-2", "pl-2", "y", domB, 5)) })
		},
		func(c *Catalog) error {
			return c.Update(ctx, func(tx *Tx) error { _, err := tx.AbandonPreparation("op-2", "stg-y"); return err })
		},
	}
	root := t.TempDir()

	refFS := vfs.NewMem()
	ref, err := New(root, Options{Logger: quiet(), FS: refFS, Now: fixedClock()})
	must(t, "ref", err)
	states := []map[string]string{{}}
	for i, op := range ops {
		must(t, "ref op", op(ref))
		states = append(states, rawDump(t, root, refFS))
		_ = i
	}

	mem := vfs.NewCrashableMem()
	rec := &crashRecorder{mem: mem}
	c, err := New(root, Options{Logger: quiet(), FS: errorfs.Wrap(mem, rec), Now: fixedClock()})
	must(t, "new", err)
	rec.armed.Store(true)
	for _, op := range ops {
		must(t, "op", op(c))
		rec.completed.Add(1)
	}
	rec.armed.Store(false)
	for i, p := range rec.points {
		got := rawDump(t, root, p.fs)
		n := int(p.completed)
		if !equalDump(got, states[n]) && !(n+1 < len(states) && equalDump(got, states[n+1])) {
			t.Fatalf("crash point %d after %d operations: state matches neither", i, n)
		}
		// The catalog is usable after the crash.
		cc, err := New(root, Options{Logger: quiet(), FS: p.fs})
		must(t, "new on clone", err)
		must(t, "view on clone", cc.View(ctx, func(tx *Tx) error { _, err := tx.AllLeases(); return err }))
	}
	t.Logf("%d crash points over %d catalog operations", len(rec.points), len(ops))
}
