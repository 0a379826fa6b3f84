// Package idlemem gives back what a long-lived Lazaret process holds only
// for its start-up, once it goes idle (the CLI relaying a session, the Host
// Coordinator after publishing its Domain, the Runtime Supervisor once the
// sandbox is ready, the Git-routing daemon once it serves).
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
package idlemem

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
func Settle(log *slog.Logger) Result {
	// Calls that come while one runs (concurrent session starts) are
	// covered by it.
	if !running.CompareAndSwap(false, true) {
		return Result{}
	}
	defer running.Store(false)
	begin := time.Now()
	var r Result
	r.HeapReleased = freeHeap()
	heapTook := time.Since(begin)
	n, size, err := dropExecutable()
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
	maps, err := readOnlyMappings("/proc/self/maps", exe)
	if err != nil {
		return 0, 0, err
	}
	var total uint64
	for i, m := range maps {
		// Page cache folios of a binary can be 2 MiB (e.g. a file
		// written in one large write), which a fault may map whole as
		// a huge PMD: one instruction run later would bring 2 MiB back.
		// MADV_NOHUGEPAGE keeps faults to small-page mappings (recent
		// kernels' fault-around still maps a whole large folio with
		// small pages). Kernels without THP refuse the advice, which
		// changes nothing here.
		madvise(m.start, m.end-m.start, unix.MADV_NOHUGEPAGE)
		if err := madvise(m.start, m.end-m.start, unix.MADV_DONTNEED); err != nil {
			return i, total, fmt.Errorf("idle memory: madvise %#x-%#x: %w", m.start, m.end, err)
		}
		total += uint64(m.end - m.start)
	}
	return len(maps), total, nil
}

// mapping is one address range of /proc/PID/maps.
type mapping struct{ start, end uintptr }

// readOnlyMappings returns the mappings of path in the maps file that are
// private and neither writable nor shared: the executable's code and
// read-only data.
func readOnlyMappings(mapsFile, path string) ([]mapping, error) {
	f, err := os.Open(mapsFile)
	if err != nil {
		return nil, fmt.Errorf("idle memory: %w", err)
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// address perms offset dev inode pathname
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != path {
			continue
		}
		perms := fields[1]
		if len(perms) != 4 || perms[1] == 'w' || perms[3] != 'p' {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, mapping{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("idle memory: read %s: %w", mapsFile, err)
	}
	return out, nil
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
