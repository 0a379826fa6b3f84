//go:build lazaret_bench

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBenchRecipe (make bench): the build time of a two-step recipe over
// busybox (no downloads: what a build costs besides its steps), the build
// time of the claude profile's image as its record says (the set-up built
// it: `scripts/setup.sh images USER claude`), and the cold start of
// `lazaret run -p claude -- claude --version` with the image built.
func TestBenchRecipe(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	lazaret := filepath.Join(e.bin, "lazaret")
	marker := randHex(6)
	cfg := recipeConfig(t, "benchrecipe", "busybox", "mkdir -p /opt/recipe && echo "+marker+" > /opt/recipe/a", "echo two > /opt/recipe/b")
	var builds []float64
	for i := 0; i < 3; i++ {
		builds = append(builds, ms(asUser(t, e, ws, lazaret, "image", "build", "--force", "--config", cfg, "benchrecipe")))
		noLeftovers(t)
	}
	r := lz(t, ws, nil, "image", "build", "--config", cfg, "benchrecipe")
	own := storeImage(t, r) // now: r is reused below
	t.Cleanup(func() { os.RemoveAll(own) })

	// The claude image's own build, from its record.
	r = lz(t, ws, nil, "image", "build", "claude")
	if r.code != 0 {
		t.Fatalf("claude image: %d\n%s", r.code, r.stderr)
	}
	var rec struct {
		Seconds    float64 `json:"seconds"`
		Downloaded int64   `json:"downloaded"`
		Layer      struct {
			Bytes int64 `json:"bytes"`
		} `json:"layer"`
	}
	b, err := os.ReadFile(filepath.Join(storeImage(t, r), "lazaret-recipe.json"))
	if err != nil || json.Unmarshal(b, &rec) != nil {
		t.Fatalf("claude record: %v", err)
	}
	asUser(t, e, ws, lazaret, "run", "-p", "claude", "--", "claude", "--version") // prepared lower
	noLeftovers(t)
	var cold []float64
	for i := 0; i < *flagRuns; i++ {
		cold = append(cold, ms(asUser(t, e, ws, lazaret, "run", "-p", "claude", "--", "claude", "--version")))
		noLeftovers(t)
	}
	meas := []measurement{
		{Name: "recipe_build_busybox_2_steps", MedianMS: median(builds), RunsMS: builds},
		{Name: "recipe_build_claude_from_record", MedianMS: rec.Seconds * 1000, RunsMS: []float64{rec.Seconds * 1000}},
		{Name: "claude_version_cold_start", MedianMS: median(cold), RunsMS: cold},
	}
	fmt.Printf("\n%-34s %10s\n", "measurement (median)", "ms")
	for _, m := range meas {
		fmt.Printf("%-34s %10.1f\n", m.Name, m.MedianMS)
	}
	fmt.Printf("claude image: built in %.1f s, %.1f MiB downloaded, %.1f MiB layer\n", rec.Seconds, float64(rec.Downloaded)/(1<<20), float64(rec.Layer.Bytes)/(1<<20))
	rep := benchReport{When: time.Now().UTC(), Commit: os.Getenv("LAZARET_COMMIT"), Measurements: meas,
		Ratios: map[string]float64{"claude_downloaded_mib": float64(rec.Downloaded) / (1 << 20)}}
	recordBench(t, "recipe", "", rep)
	if *flagBenchOut != "" {
		os.MkdirAll(*flagBenchOut, 0o755)
		js, _ := json.MarshalIndent(rep, "", "  ")
		os.WriteFile(filepath.Join(*flagBenchOut, "recipe-latest.json"), js, 0o644)
		fmt.Printf("written %s\n", filepath.Join(*flagBenchOut, "recipe-latest.json"))
	}
}
