//go:build lazaret_bench

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/benchresult"
)

// benchDay is the UTC day of this run's results file, fixed at the first
// record so that a run crossing midnight writes one file.
var (
	benchDayOnce sync.Once
	benchDay     time.Time
)

// recordBench records report as benchmark name of this run's results file
// in -bench-out, bench/results/<date>-<commit>.json (pkg/benchresult;
// docs/BENCHMARKS.md is rendered from the newest one). unit applies to the
// report's numbers whose names carry none. Without -bench-out it does
// nothing.
func recordBench(t *testing.T, name, unit string, report any) {
	t.Helper()
	if *flagBenchOut == "" {
		return
	}
	js, err := json.Marshal(report)
	if err != nil {
		t.Fatalf("benchmark %s: %v", name, err)
	}
	benchDayOnce.Do(func() { benchDay = time.Now().UTC() })
	p, err := benchresult.Record(*flagBenchOut, benchDay, os.Getenv("LAZARET_COMMIT"), name,
		benchresult.Benchmark{Test: t.Name(), When: time.Now().UTC(), Unit: unit, Report: js})
	if err != nil {
		t.Errorf("record benchmark %s: %v", name, err)
		return
	}
	fmt.Printf("recorded %s in %s\n", name, p)
}
