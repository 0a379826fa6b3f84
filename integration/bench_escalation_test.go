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
	"time"
)

// benchEscalation measures the round trip of an auto-approved host
// escalation of `true` (request → verify → rule → broker execve → result →
// client exit), timed inside the sandbox (Debian image: GNU date +%N) over
// runs requests in one session, alternating with the same timing around a
// plain in-sandbox `/bin/true` (the cost of the timing itself and of a
// process start in the sandbox, reported as the baseline). It returns the
// escalation measurement, its p99 and the baseline, and the protocol round
// trip the client measures itself (escalate.TimingEnv: from building the
// request to holding the verified result, without the client's process
// start) with its p99.
func benchEscalation(t *testing.T, e *env, ws string, runs int) (measurement, float64, measurement, measurement, float64) {
	cfg := filepath.Join(e.userDir("bench-esc"), "config.toml")
	os.WriteFile(cfg, []byte("[profiles.benchesc]\nimage = \"debian\"\nauto_approve = [{exact = [\"true\"]}]\n"), 0o600)
	os.Chown(cfg, e.uid, e.gid)
	// Batches of at most 25 round trips per session, so that a loaded
	// machine stays within lz's time limit. The Domain may stop between
	// them (a new generation starts a new hc.log): the coordinator's
	// escalation lines are collected after each batch.
	var stdout strings.Builder
	hcLines := map[string]bool{}
	for done := 0; done < runs; {
		n := min(25, runs-done)
		script := fmt.Sprintf(`for i in $(seq %d); do s=$(date +%%s%%N); LAZARET_ESCALATE_TIMING=1 lazaret-escalate -- true 2>&1 || exit 1; t=$(date +%%s%%N); echo e$(( (t - s) / 1000 )); s=$(date +%%s%%N); /bin/true; t=$(date +%%s%%N); echo b$(( (t - s) / 1000 )); done`, n)
		r := lz(t, ws, nil, "run", "--config", cfg, "-p", "benchesc", "--", "sh", "-c", script)
		if r.code != 0 {
			t.Fatalf("escalation bench: %+v", r)
		}
		stdout.WriteString(r.stdout + "\n")
		done += n
		logs, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "hc.log"))
		for _, lf := range logs {
			b, _ := os.ReadFile(lf)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, "component=escalation") {
					hcLines[line] = true
				}
			}
		}
	}
	var xs, base, rt []float64
	stages := map[string][]float64{}
	var puts []int64
	for _, l := range strings.Fields(stdout.String()) {
		if k, v, ok := strings.Cut(l, "="); ok && strings.HasSuffix(k, "_us") {
			if n, err := strconv.Atoi(v); err == nil {
				stages["client_"+k] = append(stages["client_"+k], float64(n)/1000)
			}
		}
		if ns, ok := strings.CutPrefix(l, "put_unix_ns="); ok {
			if n, err := strconv.ParseInt(ns, 10, 64); err == nil {
				puts = append(puts, n)
			}
		}
		if us, ok := strings.CutPrefix(l, "roundtrip_us="); ok {
			if n, err := strconv.Atoi(us); err == nil {
				rt = append(rt, float64(n)/1000)
			}
			continue
		}
		if len(l) < 2 {
			continue
		}
		if us, err := strconv.Atoi(l[1:]); err == nil && l[0] == 'e' {
			xs = append(xs, float64(us)/1000)
		} else if err == nil && l[0] == 'b' {
			base = append(base, float64(us)/1000)
		}
	}
	if len(xs) != runs || len(base) != runs || len(rt) != runs {
		t.Fatalf("escalation bench output: %q", stdout.String())
	}
	// The coordinator's side, from its log: how long after the client's
	// rename it read the request, and its stages.
	var recvs []int64
	for line := range hcLines {
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "decide_us", "acquire_us", "run_us", "drain_us", "since_received_us":
				if n, err := strconv.Atoi(v); err == nil {
					stages["hc_"+k] = append(stages["hc_"+k], float64(n)/1000)
				}
			case "received_unix_ns":
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					recvs = append(recvs, n)
				}
			}
		}
	}
	if len(recvs) == len(puts) {
		sort.Slice(recvs, func(i, j int) bool { return recvs[i] < recvs[j] })
		for i := range puts {
			stages["hc_notice_after_put"] = append(stages["hc_notice_after_put"], float64(recvs[i]-puts[i])/1e6)
		}
	}
	var names []string
	for k := range stages {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("  stage %-28s median %7.2f ms (n=%d)\n", k, median(stages[k]), len(stages[k]))
	}
	return measurement{Name: "escalation_true_roundtrip", RunsMS: xs, MedianMS: median(xs)}, p99(xs),
		measurement{Name: "sandbox_true_baseline", RunsMS: base, MedianMS: median(base)},
		measurement{Name: "escalation_true_protocol_roundtrip", RunsMS: rt, MedianMS: median(rt)}, p99(rt)
}

func p99(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[(len(s)*99+99)/100-1]
}

// TestBenchEscalation runs only the escalation round trip.
func TestBenchEscalation(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	m, mp99, base, rt, rtp99 := benchEscalation(t, e, ws, *flagEscRuns)
	fmt.Printf("auto-approved escalation of true over %d runs: protocol round trip (measured by the client) median %.1f ms, p99 %.1f ms (target median <= 50 ms); wall time including the client's process start median %.1f ms, p99 %.1f ms; in-sandbox /bin/true timed the same way: median %.1f ms\n",
		len(m.RunsMS), rt.MedianMS, rtp99, m.MedianMS, mp99, base.MedianMS)
	recordBench(t, "escalation", "", benchReport{When: time.Now().UTC(), Commit: os.Getenv("LAZARET_COMMIT"),
		Measurements: []measurement{m, base, rt}, Ratios: map[string]float64{"roundtrip_p99_ms": mp99, "protocol_roundtrip_p99_ms": rtp99}})
	noLeftovers(t)
}
