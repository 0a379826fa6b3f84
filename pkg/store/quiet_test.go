package store

import (
	"crypto/rand"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// TestStoreQuietWhileIdle: an open Domain Store on the real filesystem
// runs no goroutine that wakes by itself (pebble's disk health tickers and
// periodic compaction granter), and still compacts: writes many memtables'
// worth, and pebble's compactions, granted only at its own calls, bring
// level 0 back under its compaction threshold; the records stay readable.
func TestStoreQuietWhileIdle(t *testing.T) {
	e := newEnv(t, nil)            // the real filesystem, as lazaret-hc opens it
	before := periodicGoroutines() // another test's unclosed pebble is not this store's
	s := e.open(t)
	stalled := false
	defer func() {
		if !stalled { // a stalled write would keep Close waiting
			s.Close()
		}
	}()

	if n := periodicGoroutines(); n > before {
		t.Fatalf("an open store runs %d periodic goroutines:\n%s", n-before, goroutineStacks())
	}

	// 64 KiB memtables: 8 MiB of writes are over a hundred flushes. The
	// keys are random, so every flushed table spans the whole key range
	// and level 0 is as many sublevels deep as there were flushes unless
	// compactions run.
	// Without compactions pebble stops the writes (its L0 write stall).
	const n = 8 << 10
	keys := make([][]byte, n)
	written := make(chan error, 1)
	go func() {
		val := make([]byte, 1024)
		for i := range keys {
			rand.Read(val)
			keys[i] = []byte(fmt.Sprintf("test/%x", val[:8]))
			if err := s.db.Set(keys[i], val, pebble.NoSync); err != nil {
				written <- err
				return
			}
		}
		written <- s.db.Flush()
	}()
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		stalled = true
		m := s.db.Metrics()
		t.Fatalf("writes stalled: %d compactions, %d sublevels in L0", m.Compact.Count, m.Levels[0].Sublevels)
	}
	var defaults pebble.Options // the store leaves L0's threshold at pebble's default
	defaults.EnsureDefaults()
	threshold := defaults.L0CompactionThreshold
	deadline := time.Now().Add(30 * time.Second)
	var m *pebble.Metrics
	for {
		m = s.db.Metrics()
		if m.Compact.Count > 0 && int(m.Levels[0].Sublevels) < threshold && m.Compact.NumInProgress == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("compactions did not keep up: %d compactions, %d sublevels in L0 (threshold %d), %d in progress",
				m.Compact.Count, m.Levels[0].Sublevels, threshold, m.Compact.NumInProgress)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d flushes, %d compactions, %d sublevels and %d tables in L0", m.Flush.Count, m.Compact.Count, m.Levels[0].Sublevels, m.Levels[0].TablesCount)
	for _, i := range []int{0, n / 2, n - 1} {
		if _, ok, err := s.get(s.db, keys[i]); err != nil || !ok {
			t.Fatalf("record %d after compaction: present %v, %v", i, ok, err)
		}
	}
	if n := periodicGoroutines(); n > before {
		t.Fatalf("%d periodic goroutines appeared:\n%s", n-before, goroutineStacks())
	}
}

// TestCompactionSchedulerUnregister: once Unregister returns, no grant
// reaches the store, even one a rise announced just before.
func TestCompactionSchedulerUnregister(t *testing.T) {
	db := &fakeCompactionDB{allowed: 1, waiting: true}
	s := newCompactionScheduler()
	s.Register(2, db)
	ok, h := s.TrySchedule()
	if !ok || h == nil {
		t.Fatal("the first compaction was refused")
	}
	if ok, _ := s.TrySchedule(); ok {
		t.Fatal("a second compaction was granted over an allowance of 1")
	}
	db.setAllowed(3)
	s.UpdateGetAllowedWithoutPermission() // grants on another goroutine
	deadline := time.Now().Add(10 * time.Second)
	for db.scheduled() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("a rise in the allowance granted %d compactions, want 2", db.scheduled())
		}
		time.Sleep(time.Millisecond)
	}
	s.Unregister()
	before := db.scheduled()
	h.Done() // frees a slot: must not grant after Unregister
	db.setAllowed(10)
	s.UpdateGetAllowedWithoutPermission()
	if ok, _ := s.TrySchedule(); ok {
		t.Fatal("TrySchedule granted after Unregister")
	}
	time.Sleep(50 * time.Millisecond)
	if got := db.scheduled(); got != before {
		t.Fatalf("%d compactions granted after Unregister", got-before)
	}
}

// periodicGoroutines counts the goroutines of pebble's that wake by
// themselves: the compaction scheduler's granter and the disk health
// checker's tickers.
func periodicGoroutines() int {
	n := 0
	for _, g := range strings.Split(goroutineStacks(), "\n\n") {
		if strings.Contains(g, "periodicGranter") || strings.Contains(g, "diskHealthChecking") {
			n++
		}
	}
	return n
}

// goroutineStacks is every goroutine's stack.
func goroutineStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// fakeCompactionDB stands in for pebble's side of the scheduler, for the
// one ordering a real store cannot be made to show on demand: an
// announcement racing Unregister. Every compaction waits and is accepted.
type fakeCompactionDB struct {
	mu      sync.Mutex
	allowed int
	waiting bool
	granted int
}

func (d *fakeCompactionDB) setAllowed(n int) { d.mu.Lock(); d.allowed = n; d.mu.Unlock() }
func (d *fakeCompactionDB) scheduled() int   { d.mu.Lock(); defer d.mu.Unlock(); return d.granted }

func (d *fakeCompactionDB) GetAllowedWithoutPermission() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.allowed
}

func (d *fakeCompactionDB) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.waiting, pebble.WaitingCompaction{}
}

func (d *fakeCompactionDB) Schedule(pebble.CompactionGrantHandle) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.granted++
	return true
}
