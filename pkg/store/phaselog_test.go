package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/lazaret/lazaret/pkg/participant"
)

// phaseLog is a logger that keeps the "participant phase recorded" lines.
type phaseLog struct{ buf bytes.Buffer }

func (l *phaseLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// take returns the phase changes logged since the last take, as
// "role from->phase".
func (l *phaseLog) take(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r struct {
			Msg                      string
			Participant, From, Phase string
			Generation               uint64
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r.Msg == "participant phase recorded" {
			out = append(out, r.Participant+" "+r.From+"->"+r.Phase)
		}
	}
	l.buf.Reset()
	return out
}

// TestParticipantPhaseChangesLogged: each committed participant phase
// change is logged once, in the order the transaction wrote it; a write
// that keeps the phase (a slot update), and every write of a transaction
// that does not commit, logs nothing. hc.log keeps these lines, which is
// how the teardown's declared store transitions are checked against the
// real ones (integration TestSpec32TeardownRecordsDeclaredTransitions).
func TestParticipantPhaseChangesLogged(t *testing.T) {
	e := newEnv(t, vfs.NewMem())
	var l phaseLog
	s, err := Open(e.root, e.lock, testID, Options{Logger: l.logger(), Now: fixedClock(), FS: e.fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := map[string][]string{
		"generation":                nil,
		"prepared_lower intent":     {"prepared_lower ->Intent"},
		"prepared_lower lease held": {"prepared_lower Intent->LeaseHeld"},
		"rs staged":                 nil, // same phase, a slot update
		"sandbox committed":         {"sandbox Intent->Committed"},
	}
	seen := map[string]bool{}
	startSteps(1, func(what string, fn func(tx *Tx) error) {
		ok(t, what, s.Update(fn))
		got := l.take(t)
		for _, g := range got {
			if f, p, _ := strings.Cut(strings.SplitN(g, " ", 2)[1], "->"); f == p {
				t.Errorf("%s: logged a write that kept the phase: %q", what, g)
			}
		}
		if w, ok := want[what]; ok {
			seen[what] = true
			if !reflect.DeepEqual(got, w) {
				t.Errorf("%s: logged %q, want %q", what, got, w)
			}
		}
	})
	for what := range want {
		if !seen[what] {
			t.Errorf("startSteps has no step %q", what)
		}
	}
	// A transaction that fails after writing logs nothing.
	boom := errors.New("abort")
	if err := s.Update(func(tx *Tx) error {
		if err := tx.ReleaseParticipant(1, participant.Publication); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("aborted release: %v", err)
	}
	if got := l.take(t); len(got) != 0 {
		t.Errorf("aborted transaction logged %q", got)
	}
	ok(t, "release publication", s.Update(func(tx *Tx) error { return tx.ReleaseParticipant(1, participant.Publication) }))
	if got, w := l.take(t), []string{"publication Committed->ReleaseIntent"}; !reflect.DeepEqual(got, w) {
		t.Errorf("release: logged %q, want %q", got, w)
	}
}
