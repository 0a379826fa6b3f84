package idlemem

import (
	"log/slog"
	"runtime/metrics"
)

const releasedMetric = "/memory/classes/heap/released:bytes"

// heapReleased is the runtime's count of heap bytes returned to the
// operating system.
func heapReleased() uint64 {
	s := []metrics.Sample{{Name: releasedMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// runtimeMemory is the runtime's account of the memory it maps, for a
// debug log line: live heap objects, free heap still held, stacks,
// runtime metadata and the total the runtime holds from the system.
func runtimeMemory() []any {
	names := []struct{ key, metric string }{
		{"heap_objects", "/memory/classes/heap/objects:bytes"},
		{"heap_free", "/memory/classes/heap/free:bytes"},
		{"heap_unused", "/memory/classes/heap/unused:bytes"},
		{"stacks", "/memory/classes/heap/stacks:bytes"},
		{"os_stacks", "/memory/classes/os-stacks:bytes"},
		{"metadata", "/memory/classes/metadata/other:bytes"},
		{"mspans", "/memory/classes/metadata/mspan/inuse:bytes"},
		{"gc_metadata", "/memory/classes/metadata/mcache/inuse:bytes"},
		{"profiling", "/memory/classes/profiling/buckets:bytes"},
		{"other", "/memory/classes/other:bytes"},
		{"runtime_total", "/memory/classes/total:bytes"},
		{"goroutines", "/sched/goroutines:goroutines"},
	}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n.metric
	}
	metrics.Read(s)
	out := make([]any, 0, 2*len(s))
	for i, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			out = append(out, slog.Uint64(names[i].key, v.Value.Uint64()))
		}
	}
	return out
}
