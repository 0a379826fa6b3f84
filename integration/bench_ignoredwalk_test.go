//go:build lazaret_bench

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// bindWalkDirs × bindWalkFiles files (and the directories) make the bound
// node_modules of TestBenchIgnoredBindWalk: 50,500 entries, the size of a
// mid-sized JavaScript project's dependencies.
const (
	bindWalkDirs  = 500
	bindWalkFiles = 100
)

// givenLine and returnedLine are the Runtime Supervisor's log lines (hc.log)
// for giving a bound ignored directory to a non-root session user at start
// and giving it back to the developer at the end (package rs).
var (
	givenLine    = regexp.MustCompile(`msg="ignored directory given to the session user" .* entries=(\d+) duration=(\S+)`)
	returnedLine = regexp.MustCompile(`msg="bound ignored directories given back to the developer" .* entries=(\d+) duration=(\S+)`)
)

// TestBenchIgnoredBindWalk (issue 25 item 3, and issue 22's ownership
// rule): with a non-root session user (the node, claude and codex
// profiles' agent), a bound ignored directory is given to that user at each
// start and given back to the developer at each end, a walk over every
// entry both times. It times cold starts of `lazaret run -p node -- true`
// in a workspace whose node_modules state holds 50,500 entries against one
// whose node_modules is empty (interleaved), and reads both walks' times
// from the Domain log: what an agent harness that starts a Domain per
// command pays, and what `linger` saves it.
func TestBenchIgnoredBindWalk(t *testing.T) {
	e := need(t)
	n := min(*flagRuns, 7)
	lazaret := filepath.Join(e.bin, "lazaret")
	big, empty := workspace(t), workspace(t)
	for _, ws := range []string{big, empty} {
		nodeModulesRepo(t, e, ws)
		asUser(t, e, ws, lazaret, "run", "-p", "node", "--", "true") // creates the Domain and its node_modules state
		noLeftovers(t)
	}
	domainRoot := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(big, "node")))
	state := filepath.Join(domainRoot, "ignored-state", "node_modules")
	// The state at rest is the developer's (as after any generation), so
	// it is written here as the test user's files.
	for d := 0; d < bindWalkDirs; d++ {
		dir := filepath.Join(state, "pkg"+strconv.Itoa(d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Lchown(dir, e.uid, e.gid)
		for f := 0; f < bindWalkFiles; f++ {
			p := filepath.Join(dir, "f"+strconv.Itoa(f)+".js")
			if err := os.WriteFile(p, []byte("module.exports = 1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Lchown(p, e.uid, e.gid)
		}
	}
	entries := bindWalkDirs * (bindWalkFiles + 1)

	var coldBig, coldEmpty []float64
	for i := 0; i < n; i++ {
		first, second := big, empty
		if i%2 == 1 {
			first, second = empty, big
		}
		for _, ws := range []string{first, second} {
			d := ms(asUser(t, e, ws, lazaret, "run", "-p", "node", "--", "true"))
			noLeftovers(t) // the end, with its walk, is over
			if ws == big {
				coldBig = append(coldBig, d)
			} else {
				coldEmpty = append(coldEmpty, d)
			}
		}
	}
	log, err := os.ReadFile(filepath.Join(domainRoot, "hc.log"))
	if err != nil {
		t.Fatal(err)
	}
	walks := func(re *regexp.Regexp) []float64 {
		var out []float64
		for _, m := range re.FindAllSubmatch(log, -1) {
			d, err := time.ParseDuration(string(m[2]))
			if c, _ := strconv.Atoi(string(m[1])); err == nil && c >= entries {
				out = append(out, ms(d))
			}
		}
		return out
	}
	given, returned := walks(givenLine), walks(returnedLine)
	if len(given) < n || len(returned) < n {
		t.Fatalf("the Domain log has %d walks giving and %d giving back at least %d entries, want %d each (log lines changed?)", len(given), len(returned), entries, n)
	}
	b, z := median(coldBig), median(coldEmpty)
	fmt.Printf("\nnode profile (session user agent), bound node_modules of %d entries: cold start median %.1f ms, %.1f ms with it empty (%.2fx); given to the session user at start median %.1f ms, given back at the end median %.1f ms (median of %d)\n",
		entries, b, z, b/z, median(given), median(returned), n)
	recordBench(t, "ignored_bind_walk", "ms", benchReport{When: time.Now().UTC(), Commit: os.Getenv("LAZARET_COMMIT"),
		Measurements: []measurement{
			{Name: "lazaret_run_true_node_bound_50k", MedianMS: b, RunsMS: coldBig},
			{Name: "lazaret_run_true_node_bound_empty", MedianMS: z, RunsMS: coldEmpty},
			{Name: "give_to_session_user_50k", MedianMS: median(given), RunsMS: given},
			{Name: "give_back_to_developer_50k", MedianMS: median(returned), RunsMS: returned},
		},
		Ratios: map[string]float64{"cold_start_bound_50k_vs_empty": b / z}})
}
