package idlemem

import (
	"runtime/debug"
	"sync"
)

// StartUpLimit bounds the heap of a process whose collection is deferred
// (DeferCollection): the runtime collects when its memory nears it, as it
// would under GOMEMLIMIT. A Domain's start-up heaps are a few MiB; a
// process that needs more (preparing an image's lower) is collected at
// this bound instead of at each doubling of its heap.
const StartUpLimit = 64 << 20

var (
	collectMu    sync.Mutex
	deferred     bool
	savedPercent int
	savedLimit   int64
)

// DeferCollection turns the periodic garbage collection off until the
// process first settles (Settle, SettleSoon), keeping only the bound of
// StartUpLimit (or the process's own lower limit, GOMEMLIMIT). A process
// on the cold-start path (the CLI, the Host Coordinator, the Runtime
// Supervisor, the Git-routing daemon) calls it first thing in main: its
// start-up allocates several heaps' worth that it drops soon after, and on
// two cores each collection's marking competes with the start-up of the
// other processes. Settle restores the collector's settings before it
// collects, so an idle process runs with the runtime's (or GOGC's).
func DeferCollection() {
	collectMu.Lock()
	defer collectMu.Unlock()
	if deferred {
		return
	}
	deferred = true
	savedLimit = debug.SetMemoryLimit(-1) // reads the limit
	if savedLimit > StartUpLimit {
		debug.SetMemoryLimit(StartUpLimit)
	}
	savedPercent = debug.SetGCPercent(-1)
}

// restoreCollection undoes DeferCollection (once; later calls do nothing).
func restoreCollection() {
	collectMu.Lock()
	defer collectMu.Unlock()
	if !deferred {
		return
	}
	deferred = false
	debug.SetGCPercent(savedPercent)
	debug.SetMemoryLimit(savedLimit)
}
