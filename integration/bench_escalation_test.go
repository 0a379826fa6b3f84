//go:build lazaret_bench

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// benchEscalation measures the round trip of an auto-approved host
// escalation of `true` (request → verify → rule → broker execve → result →
// client exit), timed inside the sandbox (Debian image: GNU date +%N) over
// runs requests in one session, alternating with the same timing around a
// plain in-sandbox `/bin/true` (the cost of the timing itself and of a
// process start in the sandbox, reported as the baseline). It returns the
// escalation measurement, its p99 and the baseline.
func benchEscalation(t *testing.T, e *env, ws string, runs int) (measurement, float64, measurement) {
	cfg := filepath.Join(e.userDir("bench-esc"), "config.toml")
	os.WriteFile(cfg, []byte("[profiles.benchesc]\nimage = \"debian\"\nauto_approve = [[\"true\"]]\n"), 0o600)
	os.Chown(cfg, e.uid, e.gid)
	script := fmt.Sprintf(`for i in $(seq %d); do s=$(date +%%s%%N); lazaret-escalate -- true || exit 1; t=$(date +%%s%%N); echo e$(( (t - s) / 1000 )); s=$(date +%%s%%N); /bin/true; t=$(date +%%s%%N); echo b$(( (t - s) / 1000 )); done`, runs)
	r := lz(t, ws, nil, "run", "--config", cfg, "-p", "benchesc", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("escalation bench: %+v", r)
	}
	var xs, base []float64
	for _, l := range strings.Fields(r.stdout) {
		if len(l) < 2 {
			continue
		}
		if us, err := strconv.Atoi(l[1:]); err == nil && l[0] == 'e' {
			xs = append(xs, float64(us)/1000)
		} else if err == nil && l[0] == 'b' {
			base = append(base, float64(us)/1000)
		}
	}
	if len(xs) != runs || len(base) != runs {
		t.Fatalf("escalation bench output: %q", r.stdout)
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	p99 := s[(len(s)*99+99)/100-1]
	return measurement{Name: "escalation_true_roundtrip", RunsMS: xs, MedianMS: median(xs)}, p99,
		measurement{Name: "sandbox_true_baseline", RunsMS: base, MedianMS: median(base)}
}

// TestBenchEscalation runs only the escalation round trip.
func TestBenchEscalation(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	m, p99, base := benchEscalation(t, e, ws, 101)
	fmt.Printf("auto-approved escalation of true, round trip: median %.1f ms, p99 %.1f ms over %d (target median <= 50 ms); in-sandbox /bin/true timed the same way: median %.1f ms\n", m.MedianMS, p99, len(m.RunsMS), base.MedianMS)
	noLeftovers(t)
}
