package timing

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func env(v string) func(string) string {
	return func(k string) string {
		if k == "LAZARET_DEBUG" {
			return v
		}
		return ""
	}
}

func TestSwitches(t *testing.T) {
	for _, c := range []struct {
		v             string
		timing, debug bool
	}{{"", false, false}, {"1", false, true}, {"timing", true, false}, {"timing,1", true, true}, {" timing , debug", true, true}, {"timings", false, true}} {
		if got := Requested(env(c.v)); got != c.timing {
			t.Errorf("Requested(%q) = %v, want %v", c.v, got, c.timing)
		}
		if got := DebugLogging(env(c.v)); got != c.debug {
			t.Errorf("DebugLogging(%q) = %v, want %v", c.v, got, c.debug)
		}
	}
}

func TestMarksOfSeveralRecordersInterleaveWhole(t *testing.T) {
	base := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	tick := 0
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		tick++
		return base.Add(time.Duration(tick) * time.Millisecond)
	}
	cli, path, err := Create(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	cli.MarkAt("lazaret run started", base)
	var wg sync.WaitGroup
	for _, role := range []string{"hc", "rs"} {
		r, err := Open(path, role, now)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for i := 0; i < 200; i++ {
				r.Mark(role + " stage")
			}
		}()
	}
	wg.Wait()
	cli.Mark("lazaret run exits")
	cli.Close()
	marks, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 402 {
		t.Fatalf("%d marks, want 402", len(marks))
	}
	if marks[0].Stage != "lazaret run started" || marks[len(marks)-1].Stage != "lazaret run exits" {
		t.Errorf("marks not in time order: first %+v, last %+v", marks[0], marks[len(marks)-1])
	}
	var out bytes.Buffer
	if err := Write(&out, marks[:2]); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "STAGE") || !strings.HasSuffix(lines[1], "cli   lazaret run started") || !strings.Contains(lines[2], "     1.0       1.0  ") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestNilRecorderAndMissingFile(t *testing.T) {
	var r *Recorder
	r.Mark("nothing") // must not panic
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := FromEnv("hc", func(string) string { return "" }, time.Now); got != nil {
		t.Errorf("FromEnv without %s = %v, want nil", EnvFile, got)
	}
	gone := filepath.Join(t.TempDir(), "removed.jsonl")
	if got := FromEnv("hc", func(k string) string { return gone }, time.Now); got != nil {
		t.Errorf("FromEnv of a removed trace = %v, want nil (never created)", got)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("FromEnv created the trace: %v", err)
	}
}

func TestParseRefusesMalformedLine(t *testing.T) {
	_, err := Parse(strings.NewReader(`{"t":1,"role":"hc","pid":2,"stage":"a"}` + "\nnot json\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}
