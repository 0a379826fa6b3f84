package store

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The Domain Store is open for the whole life of its Host Coordinator,
// which is idle while sessions run. Two of pebble's defaults would wake it
// for nothing:
//
//   - With no Options.FS, pebble wraps the real filesystem in its disk
//     health checker, which runs a 2 s ticker per open file and reports
//     slow operations as DiskSlow events; the store listens to none
//     (pebble's default listener drops them). The store passes vfs.Default
//     itself (quietFS).
//   - pebble's default compaction scheduler runs a granter that wakes every
//     100 ms for as long as the store is open, to catch a rise in the
//     compactions the store allows that no call announced. pebble announces
//     the rises that matter (UpdateGetAllowedWithoutPermission after a
//     flush, Done after a compaction) and asks (TrySchedule) whenever it
//     wants a compaction, so compactionScheduler grants at those calls and
//     never polls.
//
// Measured on an idle Domain (default profile, one session): lazaret-hc
// went from about 75 context switches a second to about 10.

// quietFS is the filesystem the store gives pebble when its caller gave
// none: the real one, without the disk health checker.
func quietFS(fs vfs.FS) vfs.FS {
	if fs == nil {
		return vfs.Default
	}
	return fs
}

// compactionScheduler is a pebble.CompactionScheduler that grants a
// compaction whenever fewer run than the store allows, as pebble's default
// ConcurrencyLimitScheduler does, but only when pebble calls it.
type compactionScheduler struct {
	db pebble.DBForCompaction // set by Register, before any other call

	mu           sync.Mutex
	turn         *sync.Cond // signalled when granting ends
	running      int        // compactions granted and not yet Done
	allowed      int        // the store's allowance when last read
	granting     bool       // a grant loop runs (db called without mu)
	unregistered bool
}

var _ pebble.CompactionScheduler = (*compactionScheduler)(nil)

func newCompactionScheduler() *compactionScheduler {
	s := &compactionScheduler{}
	s.turn = sync.NewCond(&s.mu)
	return s
}

// Register implements pebble.CompactionScheduler.
func (s *compactionScheduler) Register(_ int, db pebble.DBForCompaction) { s.db = db }

// Unregister implements pebble.CompactionScheduler: it returns once no
// grant is calling the store, and none will start afterwards.
func (s *compactionScheduler) Unregister() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unregistered = true
	for s.granting {
		s.turn.Wait()
	}
}

// TrySchedule implements pebble.CompactionScheduler.
func (s *compactionScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unregistered {
		return false, nil
	}
	s.allowed = s.db.GetAllowedWithoutPermission()
	if s.allowed > s.running {
		s.running++
		return true, s
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler.
// pebble may call it holding its own mutex, which granting takes, so a
// rise is granted on another goroutine.
func (s *compactionScheduler) UpdateGetAllowedWithoutPermission() {
	allowed := s.db.GetAllowedWithoutPermission()
	s.mu.Lock()
	rise := allowed > s.allowed
	s.allowed = allowed
	s.mu.Unlock()
	if rise {
		go s.grant()
	}
}

// Started, MeasureCPU and CumulativeStats implement
// pebble.CompactionGrantHandle; the store does not account compactions.
func (s *compactionScheduler) Started()                                          {}
func (s *compactionScheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *compactionScheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: a finished compaction
// frees a slot, which a waiting compaction gets at once.
func (s *compactionScheduler) Done() {
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	s.grant()
}

// grant offers the store every free slot while it has a compaction
// waiting. Grants run one at a time, and never after Unregister.
func (s *compactionScheduler) grant() {
	s.mu.Lock()
	for s.granting && !s.unregistered {
		s.turn.Wait()
	}
	if s.unregistered {
		s.mu.Unlock()
		return
	}
	s.allowed = s.db.GetAllowedWithoutPermission()
	free := s.allowed - s.running
	if free <= 0 {
		s.mu.Unlock()
		return
	}
	s.granting = true
	s.mu.Unlock()
	for ; free > 0; free-- {
		if waiting, _ := s.db.GetWaitingCompaction(); !waiting {
			break
		}
		if !s.db.Schedule(s) {
			break
		}
		s.mu.Lock()
		s.running++
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.granting = false
	s.turn.Broadcast()
	s.mu.Unlock()
}
