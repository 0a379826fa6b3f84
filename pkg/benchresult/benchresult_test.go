package benchresult

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

var day = time.Date(2026, 12, 2, 23, 59, 0, 0, time.UTC)

func report(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/report.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFigures: every flattening rule of Figures on one report.
func TestFigures(t *testing.T) {
	f := &File{Format: Format, Date: "2026-12-02", Commit: "abc1234", Benchmarks: map[string]Benchmark{
		"b": {Test: "TestBench", Unit: "s", Report: report(t)},
		"a": {Report: []byte(`{"x": 1.5}`)},
	}}
	got, err := Figures(f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Figure{
		{"a", "x", 1.5, "", 0},
		{"b", "bare_runsc_run", 300.5, "ms", 3},
		{"b", "lazaret_run_true_cold", 987, "ms", 1},
		{"b", "ratios.cold_start", 3.2845, "ratio", 0},
		{"b", "ratios.escalation_p99_ms", 27.5, "ms", 0},
		{"b", "ratios.claude_downloaded_mib", 243.6, "MiB", 0},
		{"b", "results.host.status", 3, "s", 4},
		{"b", "start_median_ms", 200, "ms", 0},
		{"b", "rss_mib_per_domain_by_process.lazaret-hc", 27.25, "MiB", 0},
		{"b", "tcp_mibps", 410, "MiB/s", 3},
		{"b", "domains", 20, "s", 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("figures:\n got %+v\nwant %+v", got, want)
	}
}

// TestRecordMerges: each benchmark replaces only its own section of the
// day's file of its commit; another commit gets its own file.
func TestRecordMerges(t *testing.T) {
	dir := t.TempDir()
	t1 := day.Add(-time.Hour)
	p, err := Record(dir, day, "abc1234-dirty", "startup", Benchmark{Test: "TestBench", When: t1, Report: report(t)})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p) != "2026-12-02-abc1234-dirty.json" {
		t.Fatalf("name %s", p)
	}
	if _, err := Record(dir, day, "abc1234-dirty", "scale", Benchmark{When: day, Report: []byte(`{"domains": 20}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Record(dir, day, "abc1234-dirty", "startup", Benchmark{When: t1, Report: []byte(`{"x": 2}`)}); err != nil {
		t.Fatal(err)
	}
	f, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	json.Compact(&compact, f.Benchmarks["startup"].Report)
	if len(f.Benchmarks) != 2 || compact.String() != `{"x":2}` || !f.Updated.Equal(day) || f.Commit != "abc1234-dirty" {
		t.Fatalf("merged file: %+v", f)
	}
	// A later file of another commit is the newest.
	q, err := Record(dir, day, "def5678", "scale", Benchmark{When: day.Add(time.Minute), Report: []byte(`{"domains": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := Newest(dir); err != nil || got != q {
		t.Fatalf("newest %s, %v; want %s", got, err, q)
	}
	// A commit name that is not a file name is recorded as unknown.
	if r, _ := Record(dir, day, "a/../b", "x", Benchmark{Report: []byte(`{}`)}); filepath.Base(r) != "2026-12-02-unknown.json" {
		t.Errorf("odd commit gave %s", r)
	}
	if _, err := Record(dir, day, "c", "x", Benchmark{Report: []byte(`{`)}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("invalid report: %v", err)
	}
}

// TestNewerFormatRefused: a file of a newer format is neither read nor
// rewritten.
func TestNewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, FileName(day, "abc1234"))
	newer := []byte(`{"format": 2, "date": "2026-12-02", "commit": "abc1234", "benchmarks": {}}`)
	os.WriteFile(p, newer, 0o644)
	if _, err := Read(p); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("read: %v", err)
	}
	if _, err := Record(dir, day, "abc1234", "x", Benchmark{Report: []byte(`{}`)}); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("record: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != string(newer) {
		t.Fatal("newer file rewritten")
	}
	os.WriteFile(p, []byte(`{"format": 1}`), 0o644)
	if _, err := Read(p); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("incomplete file: %v", err)
	}
	if _, _, err := Newest(t.TempDir()); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "make bench") {
		t.Fatalf("empty dir: %v", err)
	}
}

// TestRender: the document is one table, one row per figure, naming its
// source file and commit.
func TestRender(t *testing.T) {
	f := &File{Format: Format, Date: "2026-12-02", Commit: "abc1234", Benchmarks: map[string]Benchmark{
		"startup": {Test: "TestBench", Report: report(t)},
	}}
	doc, err := Render(f, "bench/results/2026-12-02-abc1234.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"from bench/results/2026-12-02-abc1234.json; do not edit.",
		"commit `abc1234`, 2026-12-02",
		"| startup (`TestBench`) | `bare_runsc_run` | 300.5 | ms | 3 |",
		"| startup (`TestBench`) | `lazaret_run_true_cold` | 987 | ms | 1 |",
		"| startup (`TestBench`) | `ratios.cold_start` | 3.284 | ratio |  |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q:\n%s", want, doc)
		}
	}
	if n := strings.Count(doc, "\n| startup"); n != 10 {
		t.Errorf("%d rows, want 10", n)
	}
}
