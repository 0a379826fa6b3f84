package idlemem

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The idle watch settles again after activity that came later than the
// settle SettleSoon scheduled. A Git-routing daemon is ready before its
// sandbox boots and serves the sandbox's and the session's first requests
// after its settle; a process whose settle fell inside a longer start (many
// Domains starting at once) runs start-up code after it. Such a burst maps
// code back in and leaves heap behind for the rest of an idle life.
//
// The watch counts the process's page faults (getrusage ru_minflt +
// ru_majflt): every page range a process maps back in, code or heap, is a
// fault, and one fault on the executable maps a whole page cache folio
// (up to hundreds of KiB) or a fault-around window, so a few dozen faults
// can be MiBs. It polls at intervals from WatchMin, doubling while nothing
// happens up to WatchMax (an idle process wakes about once a minute), and
// back to WatchMin after activity (an interval with more than QuietFaults
// faults). When the process is quiet for a whole interval after activity
// that took at least BusyFaults faults (counted over its active intervals,
// and since the last settle), it settles. A steadily busy process is never
// quiet for an interval and is left alone; a small burst, such as the
// runtime's own pages faulted back when it wakes after a long sleep, does
// not count: settling would only see it fault the same pages back again.
const (
	WatchMin    = Delay
	WatchMax    = 64 * time.Second
	BusyFaults  = 32
	QuietFaults = 4
)

var (
	watchOnce sync.Once
	// settledFaults is the process's fault count right after its last
	// settle, the baseline for BusyFaults.
	settledFaults atomic.Int64
)

// settleMarked settles and records the fault count after it.
func settleMarked(log *slog.Logger) {
	settle(log)
	settledFaults.Store(faults())
}

// startWatch starts the idle watch once per process.
func startWatch(log *slog.Logger) {
	watchOnce.Do(func() {
		w := watcher{prev: faults(), interval: WatchMin}
		go func() {
			next := WatchMin
			for {
				time.Sleep(next)
				var again bool
				again, next = w.step(faults(), settledFaults.Load())
				if again {
					settleMarked(log)
				}
			}
		}()
	})
}

// watcher is the idle watch's decision, apart from its clock.
type watcher struct {
	prev     int64         // fault count at the previous poll
	interval time.Duration // the current poll interval
	burst    int64         // faults in the active intervals since the last quiet one
}

// step takes the fault count now and right after the last settle; it
// reports whether to settle now and how long to wait before the next poll.
func (w *watcher) step(now, settled int64) (bool, time.Duration) {
	delta := now - w.prev
	w.prev = now
	if delta > QuietFaults {
		w.burst += delta
		w.interval = WatchMin
		return false, w.interval
	}
	again := w.burst >= BusyFaults && now-settled >= BusyFaults
	w.burst = 0
	if again {
		w.interval = WatchMin
		return true, w.interval
	}
	w.interval = min(2*w.interval, WatchMax)
	return false, w.interval
}

// faults is the process's count of page faults (minor and major).
func faults() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt + ru.Majflt
}
