package idlemem

import "runtime/metrics"

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
