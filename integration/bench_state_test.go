//go:build lazaret_bench

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestBenchStateAnchors (make bench, spec §3.5): first launch of the default
// (Debian) image including its preparation, a second launch reusing the
// prepared lower, and the cold start of the tiny image with its six default
// State Anchors mounted against the same image with none (target: anchors
// cost at most 20 %).
func TestBenchStateAnchors(t *testing.T) {
	e := need(t)
	n := *flagRuns
	ws := workspace(t)
	lazaret := filepath.Join(e.bin, "lazaret")
	cfg := filepath.Join(e.userDir("bench-config"), "config.toml")
	if err := os.WriteFile(cfg, []byte("[profiles.bare]\nimage = \"busybox\"\ndefault_persistent_paths = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var first, second []float64
	for i := 0; i < 3; i++ {
		// Reclaim the (unheld) Debian lower so the next launch prepares it.
		asUser(t, e, ws, lazaret, "gc", "--keep", "0", "--min-age", "0")
		first = append(first, ms(asUser(t, e, ws, lazaret, "run", "--", "true")))
		noLeftovers(t)
		second = append(second, ms(asUser(t, e, ws, lazaret, "run", "--", "true")))
		noLeftovers(t)
	}
	asUser(t, e, ws, lazaret, "run", "-p", "tiny", "--", "true")
	asUser(t, e, ws, lazaret, "run", "--config", cfg, "-p", "bare", "--", "true")
	noLeftovers(t)
	var anchored, bare []float64
	for i := 0; i < n; i++ {
		anchored = append(anchored, ms(asUser(t, e, ws, lazaret, "run", "-p", "tiny", "--", "true")))
		noLeftovers(t)
		bare = append(bare, ms(asUser(t, e, ws, lazaret, "run", "--config", cfg, "-p", "bare", "--", "true")))
		noLeftovers(t)
	}
	fmt.Printf("\n%-34s %10s\n", "measurement (median)", "ms")
	for _, m := range []struct {
		name string
		v    []float64
	}{{"debian_first_launch_with_prepare", first}, {"debian_second_launch_reused", second},
		{"tiny_cold_6_anchors", anchored}, {"tiny_cold_no_anchors", bare}} {
		fmt.Printf("%-34s %10.1f\n", m.name, median(m.v))
	}
	ratio := median(anchored) / median(bare)
	fmt.Printf("State Anchor cold-start cost: %.2fx (target <= 1.20x)\n", ratio)
	recordBench(t, "state_anchors", "ms", map[string]any{
		"debian_first_launch_with_prepare_ms": first, "debian_second_launch_reused_ms": second,
		"tiny_cold_6_anchors_ms": anchored, "tiny_cold_no_anchors_ms": bare,
		"ratios": map[string]float64{"anchors_cold_start": ratio}})
	if ratio > 1.2 {
		t.Errorf("State Anchors make the cold start %.0f%% slower (target: at most 20%%)", 100*(ratio-1))
	}
}
