package store

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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

func span(from, through uint64) []uint64 {
	var out []uint64
	for g := from; g <= through; g++ {
		out = append(out, g)
	}
	return out
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
	for p, gs := range generationsOfKeys(after) {
		if !slices.Equal(gs, span(6, 10)) {
			t.Errorf("%s records of generations %v after the close, want 6..10", p, gs)
		}
	}
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
	for p, gs := range generationsOfKeys(dump(t, s.db)) {
		if !slices.Equal(gs, span(9, 12)) {
			t.Errorf("%s records of generations %v, want 9..12", p, gs)
		}
	}
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

// TestCloseKeepsUnsettledGenerations: without a watermark (a Domain whose
// every earlier generation awaits recovery) nothing is forgotten, however
// many generations there are.
func TestCloseKeepsUnsettledGenerations(t *testing.T) {
	e := newEnv(t, nil)
	s := e.openRetaining(t, 2)
	for n := uint64(1); n <= 8; n++ {
		fullGeneration(t, s, n)
	}
	ok(t, "settle through 3", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(3) }))
	ok(t, "close", s.Close())
	s = e.openRetaining(t, 2)
	for p, gs := range generationsOfKeys(dump(t, s.db)) {
		if !slices.Equal(gs, span(4, 8)) {
			t.Errorf("%s records of generations %v, want 4..8 (above the watermark 3)", p, gs)
		}
	}
	ok(t, "close", s.Close())

	e = newEnv(t, nil)
	s = e.openRetaining(t, 2)
	for n := uint64(1); n <= 8; n++ {
		fullGeneration(t, s, n)
	}
	ok(t, "close", s.Close())
	s = e.openRetaining(t, 2)
	for p, gs := range generationsOfKeys(dump(t, s.db)) {
		if !slices.Equal(gs, span(1, 8)) {
			t.Errorf("%s records of generations %v with no watermark, want all of 1..8", p, gs)
		}
	}
	ok(t, "close", s.Close())
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
