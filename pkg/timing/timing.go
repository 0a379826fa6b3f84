// Package timing records the start-up critical path of one `lazaret run`
// when the developer asks for it with LAZARET_DEBUG=timing.
//
// The CLI creates a trace file and names it to the Host Coordinator it
// starts (EnvFile), which names it to the Runtime Supervisor. Each process
// appends its stage marks (wall-clock time, role, pid, stage) as JSON
// lines; a line is one write on an O_APPEND descriptor, so lines of the
// three processes interleave whole. When its session ends the CLI reads
// the file, prints the table (Write) and removes it; marks written after
// that (teardown) are dropped, since the file is opened without O_CREATE.
//
// A nil *Recorder records nothing: that is what every process holds
// unless the switch is on, so the cost when off is one nil check per mark.
package timing

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// EnvFile names the trace file to the Host Coordinator and the Runtime
// Supervisor.
const EnvFile = "LAZARET_TIMING_FILE"

// Requested reports whether LAZARET_DEBUG (a comma-separated list) asks
// for the timing trace.
func Requested(getenv func(string) string) bool {
	for _, w := range strings.Split(getenv("LAZARET_DEBUG"), ",") {
		if strings.TrimSpace(w) == "timing" {
			return true
		}
	}
	return false
}

// DebugLogging reports whether LAZARET_DEBUG asks for debug-level logs:
// any value except one that only asks for the timing trace.
func DebugLogging(getenv func(string) string) bool {
	for _, w := range strings.Split(getenv("LAZARET_DEBUG"), ",") {
		if w = strings.TrimSpace(w); w != "" && w != "timing" {
			return true
		}
	}
	return false
}

// Mark is one recorded stage.
type Mark struct {
	// At is the wall-clock time in Unix nanoseconds.
	At    int64  `json:"t"`
	Role  string `json:"role"`
	PID   int    `json:"pid"`
	Stage string `json:"stage"`
}

// Recorder appends one process's marks to the trace file.
type Recorder struct {
	mu   sync.Mutex
	f    *os.File
	role string
	pid  int
	now  func() time.Time
}

// Create makes a new trace file in dir for a run and returns its recorder
// (role "cli") and path.
func Create(dir string, now func() time.Time) (*Recorder, string, error) {
	f, err := os.CreateTemp(dir, "lazaret-timing-*.jsonl")
	if err != nil {
		return nil, "", fmt.Errorf("create the timing trace: %w", err)
	}
	path := f.Name()
	f.Close()
	r, err := Open(path, "cli", now)
	return r, path, err
}

// Open returns a recorder appending to the existing trace file at path.
func Open(path, role string, now func() time.Time) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("open the timing trace: %w", err)
	}
	return &Recorder{f: f, role: role, pid: os.Getpid(), now: now}, nil
}

// FromEnv is the recorder of a process the trace file was named to by
// EnvFile, or nil (recording nothing) when it was not or cannot be opened.
func FromEnv(role string, getenv func(string) string, now func() time.Time) *Recorder {
	p := getenv(EnvFile)
	if p == "" {
		return nil
	}
	r, err := Open(p, role, now)
	if err != nil {
		return nil
	}
	return r
}

// Mark records that stage was reached now.
func (r *Recorder) Mark(stage string) {
	if r != nil {
		r.MarkAt(stage, r.now())
	}
}

// MarkAt records that stage was reached at t (e.g. the process's start).
func (r *Recorder) MarkAt(stage string, t time.Time) {
	if r == nil {
		return
	}
	b, _ := json.Marshal(Mark{At: t.UnixNano(), Role: r.role, PID: r.pid, Stage: stage})
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.f.Write(append(b, '\n'))
}

// Close closes the recorder's descriptor.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	return r.f.Close()
}

// Read returns the marks of the trace at path in time order; a malformed
// line is an error naming it.
func Read(path string) ([]Mark, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads JSON-lines marks from r, in time order.
func Parse(r io.Reader) ([]Mark, error) {
	var out []Mark
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var m Mark
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Stage == "" {
			return nil, fmt.Errorf("timing trace line %d is not a mark: %q", n, sc.Text())
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// Write prints marks as a table: milliseconds since the first mark, since
// the previous one, the role and the stage.
func Write(w io.Writer, marks []Mark) error {
	if len(marks) == 0 {
		_, err := fmt.Fprintln(w, "lazaret: timing: no stages recorded")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "   AT ms\t STEP ms\tROLE\tSTAGE")
	first, prev := marks[0].At, marks[0].At
	for _, m := range marks {
		fmt.Fprintf(tw, "%8.1f\t%8.1f\t%s\t%s\n", float64(m.At-first)/1e6, float64(m.At-prev)/1e6, m.Role, m.Stage)
		prev = m.At
	}
	return tw.Flush()
}
