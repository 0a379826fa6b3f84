package integration

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSpec32TeardownRecordsDeclaredTransitions (§3.2, the teardown of a
// generation): a real generation's teardown records, step by step, exactly
// the Domain Store transitions its declared step list names (pkg/hc
// teardown.go, pinned by TestTeardownOrder) and in that order. The
// coordinator logs each step with the records it declares, and the store
// logs each participant phase change once it has committed (debug lines,
// kept in hc.log with LAZARET_DEBUG=1); the test reads both back through
// `lazaret logs --debug --json`.
func TestSpec32TeardownRecordsDeclaredTransitions(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	if r := lzEnv(t, ws, []string{"LAZARET_DEBUG=1"}, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	type attr struct{ Key, Value string }
	type record struct {
		Msg   string
		Attrs []attr
	}
	get := func(r record, key string) (string, bool) {
		for _, a := range r.Attrs {
			if a.Key == key {
				return a.Value, true
			}
		}
		return "", false
	}
	var recs []record
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := lz(t, ws, nil, "logs", "-p", "tiny", "--debug", "--json")
		if r.code != 0 {
			t.Fatalf("logs: %+v", r)
		}
		recs = recs[:0]
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var rec record
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("logs --json line %q: %v", line, err)
			}
			recs = append(recs, rec)
		}
		if slices.ContainsFunc(recs, func(r record) bool { return r.Msg == "domain stopped" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"domain stopped\" in the Domain's log within 60 s:\n%s", r.stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}

	type step struct {
		name            string
		declared, found []string
	}
	var steps []*step
	var before []string // phase changes before the teardown began
	for _, r := range recs {
		switch r.Msg {
		case "teardown":
			name, _ := get(r, "step")
			declared, ok := get(r, "records")
			if !ok {
				t.Fatalf("teardown step %q is logged without its declared records: %+v", name, r)
			}
			s := &step{name: name}
			if declared != "" {
				s.declared = strings.Split(declared, ",")
			}
			steps = append(steps, s)
		case "participant phase recorded":
			role, _ := get(r, "participant")
			phase, _ := get(r, "phase")
			if len(steps) == 0 {
				before = append(before, role+" "+phase)
				continue
			}
			cur := steps[len(steps)-1]
			cur.found = append(cur.found, role+" "+phase)
		}
	}
	if len(steps) == 0 || len(before) == 0 {
		t.Fatalf("the log has %d teardown steps and %d phase changes before them: the comparison below would prove nothing", len(steps), len(before))
	}
	total := 0
	for _, s := range steps {
		total += len(s.declared)
		if !slices.Equal(s.declared, s.found) {
			t.Errorf("teardown step %q declares %q, the Domain Store recorded %q", s.name, s.declared, s.found)
		}
	}
	if total < 14 {
		t.Errorf("the teardown declares %d store transitions, want the 14 of every participant's release and clean", total)
	}
	t.Logf("%d teardown steps, %d store transitions as declared; %d phase changes before the teardown", len(steps), total, len(before))
	noLeftovers(t)
}
