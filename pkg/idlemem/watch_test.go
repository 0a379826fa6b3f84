package idlemem

import (
	"os"
	"testing"
	"time"
)

// TestWatcherStep drives the idle watch's decision through quiet backoff,
// a burst of faults, the settle after it, and a trickle and small bursts
// that never count.
func TestWatcherStep(t *testing.T) {
	const base = 1000
	w := watcher{prev: base, interval: WatchMin}
	settled := int64(base)
	type poll struct {
		faults   int64
		settle   bool
		interval time.Duration
	}
	burst := int64(base + QuietFaults + 3*BusyFaults)
	for i, p := range []poll{
		{base + QuietFaults, false, 2 * WatchMin},                       // quiet, nothing since the settle: back off
		{base + QuietFaults, false, 4 * WatchMin},                       // still quiet
		{base + QuietFaults + 2*BusyFaults, false, WatchMin},            // a burst: poll often again
		{burst, false, WatchMin},                                        // still busy
		{burst + QuietFaults, true, WatchMin},                           // quiet after the burst: settle
		{burst + 3*QuietFaults, false, WatchMin},                        // (settled at burst+2Q) the settle's own tail
		{burst + 3*QuietFaults, false, 2 * WatchMin},                    // quiet, Q faults since the settle
		{burst + 4*QuietFaults, false, 4 * WatchMin},                    // a trickle within QuietFaults
		{burst + 4*QuietFaults + BusyFaults/2, false, WatchMin},         // activity
		{burst + 4*QuietFaults + BusyFaults/2 + 1, false, 2 * WatchMin}, // quiet, but under BusyFaults since the settle
	} {
		if i == 5 {
			settled = burst + 2*QuietFaults
		}
		got, next := w.step(p.faults, settled)
		if got != p.settle || next != p.interval {
			t.Fatalf("poll %d at %d faults: settle %v next %v, want %v %v", i, p.faults, got, next, p.settle, p.interval)
		}
	}
	// A trickle of at most QuietFaults per interval never settles, however
	// many faults it adds up to.
	w = watcher{prev: base, interval: WatchMin}
	for f := int64(base); f < base+3*BusyFaults; f += QuietFaults {
		if again, _ := w.step(f+QuietFaults, base); again {
			t.Fatalf("settled on a trickle at %d faults", f+QuietFaults)
		}
	}
	// Small bursts, each under BusyFaults, never settle either.
	w = watcher{prev: base, interval: WatchMin}
	for f := int64(base); f < base+4*BusyFaults; f += BusyFaults / 2 {
		w.step(f+BusyFaults/2, base)
		if again, _ := w.step(f+BusyFaults/2, base); again {
			t.Fatalf("settled on a small burst at %d faults", f+BusyFaults/2)
		}
	}
	w = watcher{interval: WatchMax}
	if _, next := w.step(0, 0); next != WatchMax {
		t.Fatalf("backoff beyond WatchMax: %v", next)
	}
}

// TestFaultsCount: touching fresh pages counts faults.
func TestFaultsCount(t *testing.T) {
	before := faults()
	b := make([]byte, 4<<20)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	if after := faults(); after-before < 512 {
		t.Fatalf("faults %d -> %d after touching 1024 fresh pages", before, after)
	}
}
