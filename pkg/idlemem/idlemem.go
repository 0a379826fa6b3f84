// Package idlemem gives back what a long-lived Lazaret process holds only
// for its start-up, once it goes idle (the CLI relaying a session, the Host
// Coordinator after publishing its Domain, the Runtime Supervisor once the
// sandbox is ready, the Git-routing daemon once it serves).
//
// A process on the cold-start path also defers its collections until then
// (DeferCollection): Settle first restores the collector's settings.
//
// Settle does two things. It collects garbage and returns every free heap
// page to the operating system (runtime/debug.FreeOSMemory): start-up
// allocates far more than an idle process keeps (protobuf and pebble set-up,
// configuration, image metadata), and the runtime's background scavenger
// would return it only slowly. And it unmaps the process's own pages of its
// executable's read-only segments (code and read-only data) with
// madvise(MADV_DONTNEED), after MADV_NOHUGEPAGE so that what runs later
// is not mapped back as whole 2 MiB pages: they are clean private file
// pages, so the next access faults them back in from the page cache,
// unchanged; start-up
// touches most of a binary that an idle process never runs again, and each
// Domain's processes would otherwise keep those pages mapped. Writable
// mappings (the data segment, the heap) are never touched.
//
// A process inside the Agent Sandbox (the guest init) calls SettleHeap,
// which keeps its executable mapped: its code pages are not clean file
// pages there. gVisor's systrap platform patches the application's system
// call sites (mov $nr, %eax; syscall) into jumps to its trampoline in the
// process's private copy of the page; dropping the copy reverts the sites
// while threads sleep in system calls entered through them, and a thread
// whose call a signal restarts then resumes in the middle of a re-patched
// instruction: SIGILL (measured: a guest Go program that drops its text
// while signalled threads sleep in futex dies of it within seconds, and
// runs on without the drop).
package idlemem

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/procmaps"
)

// Delay is how long SettleSoon waits for the process to stay quiet.
const Delay = time.Second

var (
	soonMu    sync.Mutex
	soonTimer *time.Timer
	// soonDelay is SettleSoon's wait: Delay (a test shortens it).
	soonDelay = Delay
)

// SettleSoon runs Settle (with log) once Delay has passed since the last
// SettleSoon call: a process calls it where it goes idle (a Domain
// published, a session started), and what still runs right after that
// point (the first output relayed, records written) neither waits for the
// collection nor faults back in what Settle just unmapped. The first call
// also starts the process's idle watch (see WatchMin), which settles again
// after later activity.
func SettleSoon(log *slog.Logger) {
	soonMu.Lock()
	defer soonMu.Unlock()
	if soonTimer != nil {
		soonTimer.Stop()
	}
	soonTimer = time.AfterFunc(soonDelay, func() { settleMarked(log) })
	startWatch(log)
}

// settle is Settle (a test counts the calls).
var settle = Settle

// running is set while a Settle runs.
var running atomic.Bool

// Result is what Settle did.
type Result struct {
	// HeapReleased is the number of heap bytes FreeOSMemory returned.
	HeapReleased uint64
	// TextMappings and TextBytes are the read-only mappings of the
	// executable Settle unmapped and their total size (mapped or not).
	TextMappings int
	TextBytes    uint64
}

// Settle releases start-up memory (see the package documentation). It
// never fails its caller: what it cannot do is logged (at debug level) to
// log, which may be nil. A call while another runs does nothing. It costs a
// blocking garbage collection (milliseconds for these heaps); processes
// call SettleSoon.
func Settle(log *slog.Logger) Result { return settleWith(log, true) }

// SettleHeap is Settle without unmapping the executable's pages: for a
// process inside the Agent Sandbox (see the package documentation).
func SettleHeap(log *slog.Logger) Result { return settleWith(log, false) }

func settleWith(log *slog.Logger, text bool) Result {
	// Calls that come while one runs (concurrent session starts) are
	// covered by it.
	if !running.CompareAndSwap(false, true) {
		return Result{}
	}
	defer running.Store(false)
	restoreCollection()
	begin := time.Now()
	var r Result
	r.HeapReleased = freeHeap()
	heapTook := time.Since(begin)
	var n int
	var size uint64
	var err error
	if text {
		n, size, err = dropExecutable()
	}
	r.TextMappings, r.TextBytes = n, size
	if log != nil {
		if err != nil {
			log.Debug("idle memory: executable pages kept", "err", err)
		}
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("idle memory settled", append([]any{"took", time.Since(begin), "heap_took", heapTook, "heap_released", r.HeapReleased, "text_mappings", n, "text_bytes", size}, runtimeMemory()...)...)
		}
	}
	return r
}

// freeHeap runs FreeOSMemory and reports how many heap bytes it released.
func freeHeap() uint64 {
	before := heapReleased()
	debug.FreeOSMemory()
	after := heapReleased()
	if after < before {
		return 0
	}
	return after - before
}

// dropExecutable unmaps this process's pages of the read-only private
// mappings of its own executable.
func dropExecutable() (int, uint64, error) {
	if traced() {
		// A debugger's breakpoints are private copies of code pages:
		// unmapping them would drop the breakpoints.
		return 0, 0, fmt.Errorf("idle memory: the process is traced")
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, 0, fmt.Errorf("idle memory: executable: %w", err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, 0, fmt.Errorf("idle memory: %w", err)
	}
	maps := procmaps.ReadOnly(b, exe)
	var total uint64
	for i, m := range maps {
		// Page cache folios of a binary can be 2 MiB (e.g. a file
		// written in one large write), which a fault may map whole as
		// a huge PMD: one instruction run later would bring 2 MiB back.
		// MADV_NOHUGEPAGE keeps faults to small-page mappings (recent
		// kernels' fault-around still maps a whole large folio with
		// small pages). Kernels without THP refuse the advice, which
		// changes nothing here.
		madvise(m.Start, m.End-m.Start, unix.MADV_NOHUGEPAGE)
		if err := madvise(m.Start, m.End-m.Start, unix.MADV_DONTNEED); err != nil {
			return i, total, fmt.Errorf("idle memory: madvise %#x-%#x: %w", m.Start, m.End, err)
		}
		total += uint64(m.End - m.Start)
	}
	return len(maps), total, nil
}

// traced reports whether a tracer (a debugger) is attached.
func traced() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return true
}

func madvise(addr, length uintptr, advice int) error {
	_, _, e := unix.Syscall(unix.SYS_MADVISE, addr, length, uintptr(advice))
	if e != 0 {
		return e
	}
	return nil
}
