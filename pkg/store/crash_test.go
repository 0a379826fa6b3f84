package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/lazaret/lazaret/pkg/participant"
)

// crashPoint is a crash clone of the filesystem taken just before one
// mutating filesystem operation, with the number of Updates that had
// returned at that moment.
type crashPoint struct {
	fs        *vfs.MemFS
	completed int64
	op        errorfs.Op
}

// crashRecorder clones mem before every mutating operation while armed.
type crashRecorder struct {
	mem       *vfs.MemFS
	armed     atomic.Bool
	completed atomic.Int64
	cfg       func() vfs.CrashCloneCfg
	reads     bool // also clone before reads: the state after the preceding write
	mu        sync.Mutex
	points    []crashPoint
}

func (c *crashRecorder) MaybeError(op errorfs.Op) error {
	if !c.armed.Load() || (op.Kind.ReadOrWrite() != errorfs.OpIsWrite && !c.reads) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	done := c.completed.Load()
	c.points = append(c.points, crashPoint{fs: c.mem.CrashClone(c.cfg()), completed: done, op: op})
	return nil
}

type namedStep struct {
	what  string
	fn    func(tx *Tx) error
	maint func(db *pebble.DB) error // a pebble maintenance step instead of an Update
}

func (st namedStep) run(s *Store) error {
	if st.maint != nil {
		return st.maint(s.db)
	}
	return s.Update(st.fn)
}

// workload is two generations' lifecycles with memtable flushes and a
// manual compaction in between, so that crash points also fall inside
// flushes, compactions and manifest/WAL rotation.
func workload() []namedStep {
	var steps []namedStep
	add := func(what string, fn func(tx *Tx) error) { steps = append(steps, namedStep{what: what, fn: fn}) }
	maint := func(what string, fn func(db *pebble.DB) error) {
		steps = append(steps, namedStep{what: what, maint: fn})
	}
	startSteps(1, add)
	maint("flush", func(db *pebble.DB) error { return db.Flush() })
	teardownSteps(1, add)
	maint("flush", func(db *pebble.DB) error { return db.Flush() })
	maint("compact", func(db *pebble.DB) error { return db.Compact(context.Background(), []byte{0}, []byte{0xff}, true) })
	startSteps(2, add)
	maint("flush", func(db *pebble.DB) error { return db.Flush() })
	return steps
}

// reopenDump opens the store on fs (as a restarted HC would) and dumps it.
func reopenDump(t *testing.T, root string, e *env, fs vfs.FS) map[string]string {
	t.Helper()
	s, err := Open(root, e.lock, testID, Options{Logger: quietLogger(), Now: fixedClock(), FS: fs})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer s.Close()
	return dump(t, s.db)
}

// TestCrashDuringUpdates takes a crash clone before every mutating
// filesystem operation of a whole lifecycle workload (two generations, with
// teardown) and checks that each clone reopens to exactly the state after
// the last Update that had returned, or after the one in flight: never a
// half-applied Update.
func TestCrashDuringUpdates(t *testing.T) {
	for _, mode := range []struct {
		name     string
		unsynced int
		reads    bool
	}{{"synced-only", 0, true}, {"half-unsynced", 50, false}} {
		t.Run(mode.name, func(t *testing.T) {
			steps := workload()

			// Reference states on a plain in-memory filesystem.
			ref := newEnv(t, vfs.NewMem())
			rs := ref.open(t)
			states := []map[string]string{dump(t, rs.db)}
			for _, st := range steps {
				ok(t, st.what, st.run(rs))
				states = append(states, dump(t, rs.db))
			}
			rs.Close()

			mem := vfs.NewCrashableMem()
			e := newEnv(t, mem)
			e.root = ref.root // same logical path in a fresh filesystem
			e.lock = ref.lock
			rng := rand.New(rand.NewPCG(7, uint64(mode.unsynced)))
			rec := &crashRecorder{mem: mem, reads: mode.reads, cfg: func() vfs.CrashCloneCfg {
				if mode.unsynced == 0 {
					return vfs.CrashCloneCfg{}
				}
				return vfs.CrashCloneCfg{UnsyncedDataPercent: mode.unsynced, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
			}}
			s, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), Now: fixedClock(), FS: errorfs.Wrap(mem, rec)})
			if err != nil {
				t.Fatal(err)
			}
			if got := dump(t, s.db); !sameDump(got, states[0]) {
				t.Fatalf("initial state differs: %s vs %s", describe(got), describe(states[0]))
			}
			rec.armed.Store(true)
			for _, st := range steps {
				ok(t, st.what, st.run(s))
				rec.completed.Add(1)
			}
			rec.armed.Store(false)
			s.Close()

			if len(rec.points) < len(steps) {
				t.Fatalf("only %d crash points for %d updates", len(rec.points), len(steps))
			}
			inFlightVisible := 0
			for i, p := range rec.points {
				got := reopenDump(t, e.root, e, p.fs)
				c := int(p.completed)
				switch {
				case sameDump(got, states[c]):
				case c+1 < len(states) && sameDump(got, states[c+1]):
					inFlightVisible++
				default:
					t.Fatalf("crash point %d (before %v %s, %d updates returned): state matches neither %q nor %q:\n got %s",
						i, p.op.Kind, p.op.Path, c, stepName(steps, c-1), stepName(steps, c), describe(got))
				}
			}
			kinds := map[string]int{}
			for _, p := range rec.points {
				kinds[fmt.Sprintf("%v", p.op.Kind)]++
			}
			t.Logf("%d crash points over %d steps (%v); %d showed the in-flight update already durable", len(rec.points), len(steps), kinds, inFlightVisible)
		})
	}
}

func stepName(steps []namedStep, i int) string {
	if i < 0 {
		return "open"
	}
	if i >= len(steps) {
		return "end"
	}
	return steps[i].what
}

// TestCrashDuringMigration: a crash at any point of the v1 -> v2 migration
// leaves either the untouched v1 store or the complete v2 store, and the
// next open finishes the migration to the same result.
func TestCrashDuringMigration(t *testing.T) {
	mem := vfs.NewCrashableMem()
	e := newEnv(t, mem)
	db := e.rawDB(t)
	plantV1(t, db)
	v1Dump := dump(t, db)
	db.Close()

	// Reference migration on a clone.
	refFS := mem.CrashClone(vfs.CrashCloneCfg{})
	migrated := reopenDump(t, e.root, e, refFS)

	rec := &crashRecorder{mem: mem, cfg: func() vfs.CrashCloneCfg { return vfs.CrashCloneCfg{} }}
	rec.armed.Store(true)
	s, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), FS: errorfs.Wrap(mem, rec)})
	if err != nil {
		t.Fatal(err)
	}
	rec.armed.Store(false)
	s.Close()
	if len(rec.points) == 0 {
		t.Fatal("no crash points")
	}
	for i, p := range rec.points {
		raw := e.rawDBOn(t, p.fs)
		d := dump(t, raw)
		raw.Close()
		if !sameDump(d, v1Dump) && !sameDump(d, migrated) {
			t.Fatalf("crash point %d: half-migrated store %s", i, describe(d))
		}
		if got := reopenDump(t, e.root, e, p.fs); !sameDump(got, migrated) {
			t.Fatalf("crash point %d: reopen did not finish the migration", i)
		}
	}
	t.Logf("%d crash points during migration", len(rec.points))
}

var _ = participant.Intent

func (c *crashRecorder) String() string { return "crash-recorder" }
