package preparedlower

import (
	"flag"
	"os"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/model/check"
)

var (
	full      = flag.Bool("full", false, "explore the full tla/PreparedLower.cfg fixture instead of the reduced one")
	maxStates = flag.Int("max-states", 0, "stop after this many distinct states (0: no bound)")
	maxDepth  = flag.Int("max-depth", 0, "do not expand states at this depth (0: no bound)")
	liveness  = flag.Bool("liveness", true, "check liveness properties (needs the complete graph)")
	maxHeap   = flag.Uint64("max-heap-mib", 3584, "stop when the Go heap exceeds this many MiB (0: no bound)")
	coverage  = flag.Bool("coverage", false, "log how many edges each action instance produced")
)

func config() *Config {
	if *full {
		return Fixture()
	}
	return Reduced()
}

// TestModel explores the configuration and fails on any violation.
func TestModel(t *testing.T) {
	cfg := config()
	m := New(cfg)
	sp := m.Spec()
	res := check.Run(sp, check.Options{
		MaxStates: *maxStates, MaxDepth: *maxDepth, Liveness: *liveness, MaxHeapBytes: *maxHeap << 20,
		Progress: os.Stderr, ProgressEvery: 30 * time.Second,
	})
	t.Logf("%s: %d distinct states, %d states generated, %d edges, depth %d, deadlock states %d, complete %v%s, liveness checked %v, %s",
		cfg.Name, res.Distinct, res.Generated, res.Edges, res.Depth, res.Deadlocks, res.Complete, boundNote(res.Bound), res.Liveness, res.Duration.Round(time.Millisecond))
	if !res.Complete {
		t.Logf("exploration stopped by a bound (%s): the result is partial and liveness was not checked", res.Bound)
	}
	for _, v := range res.Violations {
		t.Errorf("%s", v.String(m.Format))
	}
	if *coverage {
		for i, a := range sp.Actions {
			t.Logf("%8d %s", res.Fired[i], a.Name)
		}
	}
}

func boundNote(b string) string {
	if b == "" {
		return ""
	}
	return " (" + b + ")"
}
