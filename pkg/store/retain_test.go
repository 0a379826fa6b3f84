package store

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// openRetaining opens e's store keeping the latest retain generations.
func (e *env) openRetaining(t testing.TB, retain uint64) *Store {
	t.Helper()
	s, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), Now: fixedClock(), FS: e.fs, retain: retain})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fullGeneration records generation n with every kind of per-generation
// record (participants, a session, the mailbox) and takes it to Clean.
func fullGeneration(t testing.TB, s *Store, n uint64) {
	t.Helper()
	startGeneration(t, s, n)
	ok(t, "mailbox", s.Update(func(tx *Tx) error {
		return tx.PutMailbox(n, &v1.GenerationMailboxRecordV1{MailboxId: "mb-1"})
	}))
	teardownGeneration(t, s, n)
}

// generationsOfKeys maps each per-generation key prefix (g/, p/, t/, x/)
// to the generations it holds records of, from a raw dump.
func generationsOfKeys(d map[string]string) map[string][]uint64 {
	out := map[string][]uint64{}
	for k := range d {
		for _, p := range []string{prefixGeneration, prefixParticipant, prefixSession, prefixMailbox} {
			if strings.HasPrefix(k, p) && len(k) >= len(p)+8 {
				g := binary.BigEndian.Uint64([]byte(k[len(p) : len(p)+8]))
				if !slices.Contains(out[p], g) {
					out[p] = append(out[p], g)
				}
			}
		}
	}
	for _, gs := range out {
		slices.Sort(gs)
	}
	return out
}

// wantGenerations fails t unless every per-generation key prefix of s
// holds records of exactly the generations from..through.
func wantGenerations(t testing.TB, s *Store, from, through uint64) {
	t.Helper()
	var want []uint64
	for g := from; g <= through; g++ {
		want = append(want, g)
	}
	held := generationsOfKeys(dump(t, s.db))
	for _, p := range []string{prefixGeneration, prefixParticipant, prefixSession, prefixMailbox} {
		if !slices.Equal(held[p], want) {
			t.Errorf("%s records of generations %v, want %d..%d", p, held[p], from, through)
		}
	}
}

// TestCloseForgetsSettledGenerations: Close deletes every record of the
// generations at or below both the recovery watermark and the latest
// generation less the retention window, and nothing else: the records it
// keeps are unchanged, an unsettled generation is kept however old, and
// generation numbers keep rising after it.
func TestCloseForgetsSettledGenerations(t *testing.T) {
	e := newEnv(t, nil)
	s := e.openRetaining(t, 4)
	for n := uint64(1); n <= 10; n++ {
		fullGeneration(t, s, n)
	}
	ok(t, "settle through 5", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(5) }))
	before := dump(t, s.db)
	ok(t, "close", s.Close())

	// The watermark (5) is below the window's start (10-4 = 6): 1..5 go.
	s = e.openRetaining(t, 4)
	after := dump(t, s.db)
	wantGenerations(t, s, 6, 10)
	for k, v := range before {
		if w, kept := after[k]; kept && w != v {
			t.Errorf("record %q changed by the close", k)
		}
		if _, kept := after[k]; !kept && !strings.ContainsAny(k[:1], "gptx") {
			t.Errorf("record %q (not per generation) forgotten", k)
		}
	}
	for _, k := range []string{string(keyVersion), string(keyDomain), string(keySettled)} {
		if _, kept := after[k]; !kept {
			t.Errorf("key %q forgotten", k)
		}
	}

	// Now the window bounds it: watermark 11, latest 12, window 4 -> 9..12.
	fullGeneration(t, s, 11)
	fullGeneration(t, s, 12)
	ok(t, "settle through 11", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(11) }))
	ok(t, "close", s.Close())
	s = e.openRetaining(t, 4)
	wantGenerations(t, s, 9, 12)
	ok(t, "the next generation after the forgotten ones", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(13)) }))
	mustRefuse(t, "a forgotten generation's number again", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(3)) }))
	ok(t, "view", s.View(func(tx *Tx) error {
		if n, err := tx.SettledThrough(); err != nil || n != 11 {
			t.Errorf("watermark %d (%v), want 11", n, err)
		}
		gs, err := tx.GenerationsAfter(11)
		if !slices.Equal(gs, []uint64{12, 13}) {
			t.Errorf("generations after the watermark %v, want [12 13]", gs)
		}
		return err
	}))
	ok(t, "close", s.Close())
}

// TestCloseKeepsUnsettledGenerations: a generation above the watermark
// (one that awaits recovery) is kept however old, and without a watermark
// nothing is forgotten, however many generations there are.
func TestCloseKeepsUnsettledGenerations(t *testing.T) {
	for _, c := range []struct {
		settled, from uint64
	}{{settled: 3, from: 4}, {settled: 0, from: 1}} {
		e := newEnv(t, nil)
		s := e.openRetaining(t, 2)
		for n := uint64(1); n <= 8; n++ {
			fullGeneration(t, s, n)
		}
		if c.settled > 0 {
			ok(t, "settle", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(c.settled) }))
		}
		ok(t, "close", s.Close())
		s = e.openRetaining(t, 2)
		wantGenerations(t, s, c.from, 8)
		ok(t, "close", s.Close())
	}
}

// TestStoreSizeBoundedByRetention: a Domain started again and again, each
// start settling the ones before it as the coordinator does, keeps a store
// of the same size on disk: the tables after 40 starts are no larger than
// after 10 (without forgetting they would hold four times the records).
func TestStoreSizeBoundedByRetention(t *testing.T) {
	e := newEnv(t, nil)
	tables := func() int64 {
		var n int64
		ents, err := os.ReadDir(filepath.Join(e.root, Dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ents {
			if strings.HasSuffix(d.Name(), ".sst") {
				fi, err := d.Info()
				if err != nil {
					t.Fatal(err)
				}
				n += fi.Size()
			}
		}
		return n
	}
	var at10 int64
	for n := uint64(1); n <= 40; n++ {
		s := e.openRetaining(t, 4)
		fullGeneration(t, s, n)
		if n > 1 {
			ok(t, "settle", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(n - 1) }))
		}
		ok(t, "close", s.Close())
		if n == 10 {
			at10 = tables()
		}
	}
	at40 := tables()
	if at10 == 0 || at40 > at10+at10/4 {
		t.Fatalf("tables: %d bytes after 10 starts, %d after 40: the store grows with its history", at10, at40)
	}
}

// TestCrashDuringCloseForgets takes a crash clone before every mutating
// filesystem operation of a Close that forgets generations (its unsynced
// batch of range deletions, the flush, the compaction, pebble's own close)
// and checks that each clone reopens to the store before the Close or the
// store after it: never some prefixes' records of a generation forgotten
// and others kept.
func TestCrashDuringCloseForgets(t *testing.T) {
	build := func(s *Store) {
		for n := uint64(1); n <= 6; n++ {
			fullGeneration(t, s, n)
		}
		ok(t, "settle through 4", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(4) }))
	}
	// Reference states on a plain in-memory filesystem.
	ref := newEnv(t, vfs.NewMem())
	rs := ref.openRetaining(t, 2)
	build(rs)
	before := dump(t, rs.db)
	ok(t, "close", rs.Close())
	rs = ref.openRetaining(t, 2)
	after := dump(t, rs.db)
	wantGenerations(t, rs, 5, 6)
	rs.Close()

	for _, unsynced := range []int{0, 50} {
		mem := vfs.NewCrashableMem()
		e := newEnv(t, mem)
		e.root, e.lock = ref.root, ref.lock // same logical path in a fresh filesystem
		rng := rand.New(rand.NewPCG(11, uint64(unsynced)))
		rec := &crashRecorder{mem: mem, reads: unsynced == 0, cfg: func() vfs.CrashCloneCfg {
			if unsynced == 0 {
				return vfs.CrashCloneCfg{}
			}
			return vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
		}}
		s, err := Open(e.root, e.lock, testID, Options{Logger: quietLogger(), Now: fixedClock(), FS: errorfs.Wrap(mem, rec), retain: 2})
		if err != nil {
			t.Fatal(err)
		}
		build(s)
		rec.armed.Store(true)
		ok(t, "close", s.Close())
		rec.armed.Store(false)
		if len(rec.points) == 0 {
			t.Fatal("no crash point inside Close")
		}
		sawAfter := false
		for i, p := range rec.points {
			got := reopenDump(t, e.root, e, p.fs)
			switch {
			case sameDump(got, before):
			case sameDump(got, after):
				sawAfter = true
			default:
				t.Fatalf("unsynced %d%%, crash point %d (before %v %s): neither the store before the Close nor after it:\n got %s",
					unsynced, i, p.op.Kind, p.op.Path, describe(got))
			}
		}
		if !sawAfter {
			t.Errorf("unsynced %d%%: no crash point after the forgetting was durable (%d points)", unsynced, len(rec.points))
		}
		t.Logf("unsynced %d%%: %d crash points inside Close", unsynced, len(rec.points))
	}
}
