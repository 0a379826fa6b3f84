package store

import (
	"slices"
	"testing"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// TestSettledThrough: the recovery watermark starts at 0, only rises, names
// a stored generation, survives a reopen, and bounds GenerationsAfter; a
// record of another version is refused, not read as 0.
func TestSettledThrough(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	through := func() uint64 {
		var n uint64
		ok(t, "read the watermark", s.View(func(tx *Tx) (err error) { n, err = tx.SettledThrough(); return err }))
		return n
	}
	after := func(n uint64) []uint64 {
		var gs []uint64
		ok(t, "generations after", s.View(func(tx *Tx) (err error) { gs, err = tx.GenerationsAfter(n); return err }))
		return gs
	}
	if n := through(); n != 0 {
		t.Fatalf("fresh store: watermark %d, want 0", n)
	}
	for g := uint64(1); g <= 3; g++ {
		ok(t, "generation", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(g)) }))
	}
	if gs := after(0); !slices.Equal(gs, []uint64{1, 2, 3}) {
		t.Fatalf("after 0: %v", gs)
	}
	ok(t, "settle through 2", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(2) }))
	ok(t, "lower is no change", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(1) }))
	mustRefuse(t, "a generation not stored", s.Update(func(tx *Tx) error { return tx.SetSettledThrough(7) }))
	if err := s.View(func(tx *Tx) error { return tx.SetSettledThrough(3) }); err == nil {
		t.Fatal("SetSettledThrough in a View: accepted")
	}
	s.Close()
	s = e.open(t)
	if n := through(); n != 2 {
		t.Fatalf("after reopen: watermark %d, want 2", n)
	}
	if gs := after(2); !slices.Equal(gs, []uint64{3}) {
		t.Fatalf("after 2: %v", gs)
	}
	if gs := after(^uint64(0)); len(gs) != 0 {
		t.Fatalf("after the largest generation number: %v", gs)
	}
	ok(t, "a record of another version", s.Update(func(tx *Tx) error {
		return tx.set(keySettled, &v1.SettledThroughV1{RecordVersion: recordVersion + 1, Generation: 3})
	}))
	if err := s.View(func(tx *Tx) error { _, err := tx.SettledThrough(); return err }); err == nil {
		t.Fatal("a watermark record of another version was read")
	}
	s.Close()
}
