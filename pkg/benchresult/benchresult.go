// Package benchresult is the format of the benchmark results that `make
// bench` records, and their rendering as docs/BENCHMARKS.md.
//
// A results file is bench/results/<date>-<commit>.json (date in UTC,
// commit as `git describe --always --dirty` names it): one JSON document
// holding, for each benchmark of that commit measured that day, the newest
// report its test wrote. Each benchmark test records its own section
// (Record), so a partial run (`-run TestBenchScale`) replaces only the
// sections it measured. The document is versioned (Format) and a file of a
// newer format is refused, never rewritten.
//
// Reports are the tests' own JSON: Figures flattens any of them into named
// numbers by fixed rules (see Figures), so a new benchmark needs no change
// here, and Render turns the newest file into the one generated table of
// docs/BENCHMARKS.md (go run ./scripts/benchtable). Figures are never
// written into prose: the README and docs/ARCHITECTURE.md point to that
// table.
package benchresult

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Format is the version of the results document this code writes and
// reads; a file with a larger one is refused.
const Format = 1

// File is one results file.
type File struct {
	Format int `json:"format"`
	// Date is the UTC day of the run (2006-01-02), Commit the build's
	// `git describe --always --dirty`.
	Date   string `json:"date"`
	Commit string `json:"commit"`
	// Updated is when a section was last recorded.
	Updated    time.Time            `json:"updated"`
	Benchmarks map[string]Benchmark `json:"benchmarks"`
}

// Benchmark is one benchmark's newest report.
type Benchmark struct {
	// Test is the go test that measured it (TestBenchGitRouting).
	Test string    `json:"test"`
	When time.Time `json:"when"`
	// Unit applies to the report's numbers whose names carry no unit.
	Unit   string          `json:"unit,omitempty"`
	Report json.RawMessage `json:"report"`
}

var commitName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// FileName is the name of the results file of commit on day (UTC).
func FileName(day time.Time, commit string) string {
	if !commitName.MatchString(commit) {
		commit = "unknown"
	}
	return day.UTC().Format("2006-01-02") + "-" + commit + ".json"
}

// Read reads and checks one results file.
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("benchmark results %s: %w", path, err), errdefs.ErrCorrupt)
	}
	if f.Format > Format {
		return nil, errdefs.New(errdefs.ErrRefused, "benchmark results %s: format %d is newer than this tree understands (%d): render it with the tree that wrote it", path, f.Format, Format)
	}
	if f.Format < 1 || f.Date == "" || f.Benchmarks == nil {
		return nil, errdefs.New(errdefs.ErrCorrupt, "benchmark results %s: not a results document (format, date or benchmarks missing)", path)
	}
	return &f, nil
}

// Record stores report as benchmark name of the results file of commit
// on day in dir, keeping the file's other benchmarks, and returns the
// file's path. The file is replaced atomically.
func Record(dir string, day time.Time, commit, name string, b Benchmark) (string, error) {
	if name == "" || len(b.Report) == 0 || !json.Valid(b.Report) {
		return "", errdefs.New(errdefs.ErrInvalid, "benchmark %q: a name and a JSON report are needed", name)
	}
	path := filepath.Join(dir, FileName(day, commit))
	f, err := Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !commitName.MatchString(commit) {
			commit = "unknown"
		}
		f, err = &File{Format: Format, Date: day.UTC().Format("2006-01-02"), Commit: commit, Benchmarks: map[string]Benchmark{}}, nil
	}
	if err != nil {
		return "", err
	}
	f.Benchmarks[name] = b
	if b.When.After(f.Updated) {
		f.Updated = b.When
	}
	js, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".results-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(js, '\n')); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

var resultsName = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}-[A-Za-z0-9._-]+\.json$`)

// Newest returns the results file of dir that was updated last (by its
// Updated field; the name breaks ties).
func Newest(dir string) (string, *File, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, err
	}
	var best string
	var bestF *File
	for _, e := range ents {
		if e.IsDir() || !resultsName.MatchString(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		f, err := Read(p)
		if err != nil {
			return "", nil, err
		}
		if bestF == nil || f.Updated.After(bestF.Updated) || (f.Updated.Equal(bestF.Updated) && p > best) {
			best, bestF = p, f
		}
	}
	if bestF == nil {
		return "", nil, errdefs.New(errdefs.ErrUnavailable, "no benchmark results (<date>-<commit>.json) in %s: run make bench", dir)
	}
	return best, bestF, nil
}

// Figure is one number of a report.
type Figure struct {
	Benchmark string
	Name      string
	Value     float64
	Unit      string
	// Runs is how many samples Value is the median of (0: a single value).
	Runs int
}

// Figures flattens every benchmark's report into its figures, sorted by
// benchmark and then in the report's own order:
//
//   - a number is a figure named by its path of keys (a.b.c);
//   - an array of numbers is one figure, their median, with Runs samples;
//   - an array of objects with a "name" is a list of measurements: each is
//     the figure named by its name, valued by its "median_ms" (ms) with
//     Runs the length of its "runs_ms";
//   - other arrays of objects are detail (per-stage timings, per-run
//     records) and give no figure;
//   - keys "when" and "commit" are metadata;
//   - an array X_ms whose object also has X_median_ms gives no figure of
//     its own (the median is already there).
//
// The unit is that of the innermost key of the name that has one: *_ms
// and *_ms_* ms, *_mibps MiB/s, *_mib and *_mib_* MiB; else "ratio" under a
// "ratios" object; else the benchmark's Unit.
func Figures(f *File) ([]Figure, error) {
	names := make([]string, 0, len(f.Benchmarks))
	for n := range f.Benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Figure
	for _, n := range names {
		b := f.Benchmarks[n]
		d := json.NewDecoder(bytes.NewReader(b.Report))
		d.UseNumber()
		v, err := decodeOrdered(d)
		if err != nil {
			return nil, errdefs.Mark(fmt.Errorf("benchmark %s: %w", n, err), errdefs.ErrCorrupt)
		}
		fl := flattener{bench: n, unit: b.Unit}
		fl.walk(nil, v)
		out = append(out, fl.out...)
	}
	return out, nil
}

// object is a JSON object with its keys in document order.
type object struct {
	keys []string
	vals map[string]any
}

func decodeOrdered(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeOrdered(d)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := d.Token()
			return o, err
		case '[':
			var a []any
			for d.More() {
				v, err := decodeOrdered(d)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return a, err
		}
	}
	return tok, nil
}

type flattener struct {
	bench, unit string
	out         []Figure
}

func (fl *flattener) add(path []string, v float64, runs int) {
	fl.out = append(fl.out, Figure{Benchmark: fl.bench, Name: strings.Join(path, "."), Value: v, Unit: fl.unitOf(path), Runs: runs})
}

func (fl *flattener) unitOf(path []string) string {
	for i := len(path) - 1; i >= 0; i-- {
		k := strings.ToLower(path[i])
		switch {
		case strings.HasSuffix(k, "_ms") || strings.Contains(k, "_ms_"):
			return "ms"
		case strings.HasSuffix(k, "_mibps"):
			return "MiB/s"
		case strings.HasSuffix(k, "_mib") || strings.Contains(k, "_mib_"):
			return "MiB"
		}
	}
	for _, p := range path {
		if p == "ratios" {
			return "ratio"
		}
	}
	return fl.unit
}

func (fl *flattener) walk(path []string, v any) {
	switch t := v.(type) {
	case json.Number:
		if x, err := t.Float64(); err == nil {
			fl.add(path, x, 0)
		}
	case *object:
		for _, k := range t.keys {
			if k == "when" || k == "commit" {
				continue
			}
			if base, ok := strings.CutSuffix(k, "_ms"); ok {
				_, arr := t.vals[k].([]any)
				if _, has := t.vals[base+"_median_ms"]; has && arr {
					continue
				}
			}
			fl.walk(append(append([]string(nil), path...), k), t.vals[k])
		}
	case []any:
		if nums, ok := numbers(t); ok {
			if len(nums) > 0 && len(path) > 0 {
				fl.add(path, median(nums), len(nums))
			}
			return
		}
		for _, e := range t {
			o, ok := e.(*object)
			if !ok {
				return
			}
			name, ok := o.vals["name"].(string)
			if !ok {
				return // detail, not measurements
			}
			m, ok := o.vals["median_ms"].(json.Number)
			if !ok {
				continue
			}
			x, err := m.Float64()
			if err != nil {
				continue
			}
			runs := 0
			if r, ok := o.vals["runs_ms"].([]any); ok {
				runs = len(r)
			}
			fl.out = append(fl.out, Figure{Benchmark: fl.bench, Name: name, Value: x, Unit: "ms", Runs: runs})
		}
	}
}

func numbers(a []any) ([]float64, bool) {
	var out []float64
	for _, e := range a {
		n, ok := e.(json.Number)
		if !ok {
			return nil, false
		}
		x, err := n.Float64()
		if err != nil {
			return nil, false
		}
		out = append(out, x)
	}
	return out, true
}

// median is the middle sample (the upper one of an even count), as the
// benchmark tests compute it.
func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// Render is docs/BENCHMARKS.md for f, read from source (a path relative
// to the repository).
func Render(f *File, source string) (string, error) {
	figs, err := Figures(f)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("<!-- Generated by `go run ./scripts/benchtable` from " + source + "; do not edit. -->\n\n")
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("`make bench` measures; its results are `bench/results/<date>-<commit>.json`.\n")
	b.WriteString("This table is the newest of them, " + "`" + source + "`" + " (commit `" + f.Commit + "`, " + f.Date + ").\n")
	b.WriteString("What each benchmark measures, and its target, is in the benchmark test's doc\n")
	b.WriteString("comment (`integration/bench_*_test.go`, named in the first column). Absolute\n")
	b.WriteString("times vary by up to 2× between runs on a 2-core machine: compare ratios\n")
	b.WriteString("taken in one run.\n\n")
	b.WriteString("| benchmark | figure | value | unit | runs |\n")
	b.WriteString("| --- | --- | ---: | --- | ---: |\n")
	for _, fg := range figs {
		bench := fg.Benchmark
		if t := f.Benchmarks[fg.Benchmark].Test; t != "" {
			bench += " (`" + t + "`)"
		}
		runs := ""
		if fg.Runs > 0 {
			runs = fmt.Sprint(fg.Runs)
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", bench, strings.ReplaceAll(fg.Name, "|", `\|`), format(fg.Value), fg.Unit, runs)
	}
	return b.String(), nil
}

// format prints whole numbers as such, values of 100 or more to one
// decimal and smaller ones to three (ms to the microsecond, ratios to three
// places).
func format(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
