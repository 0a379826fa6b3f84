// Package trace defines the event vocabulary and the abstraction function by
// which the Host Coordinator (HC) and Runtime Supervisor (RS) record
// protocol-level transitions, and replays such traces through the Go
// transcriptions of the TLA+ models (pkg/model/lazaret,
// pkg/model/preparedlower) to check that an implementation run is a
// behaviour of the model.
//
// An Event names one TLA+ action instance in product terms: the action name
// (exactly as in the .tla), its parameters as product identifiers (Domain
// ID, Session ID, Escalation Request ID, command digest, prepared-artifact
// ID, generation key), the recording role, and optionally an observation of
// model variables after the step as the recorder saw them. The Binding is
// the abstraction function: it maps product identifiers to the model values
// of a checking configuration, and observations are compared with the
// model's own rendering of the successor (variable[key] -> TLA+ value).
// Traces are stored as JSON Lines, one Event per line.
package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// Event is one recorded protocol-level transition.
type Event struct {
	// Seq orders events of one Domain generation (monotonic per recorder;
	// the merged trace is ordered by the HC's commit order).
	Seq uint64 `json:"seq"`
	// Model is "Lazaret" or "PreparedLower".
	Model string `json:"model"`
	// Action is the TLA+ action name, e.g. "StartSandbox".
	Action string `json:"action"`
	// Args are product identifiers of the action's parameters, in the
	// order of the TLA+ definition (see Vocabulary).
	Args []string `json:"args,omitempty"`
	// Role is the recording role: "hc", "rs", "bootstrap" or "cli".
	Role string `json:"role"`
	// Observed optionally maps model variables ("sandboxState[D1]",
	// "published") to the TLA+ value the recorder observed after the step,
	// with model values already abstracted (see Binding.Observation).
	Observed map[string]string `json:"observed,omitempty"`
}

// Binding is the abstraction function from product identifiers to model
// values: kind ("Domain", "Session", "Request", "Command", "Artifact",
// "Generation") -> product identifier -> model value (e.g. "D1").
type Binding map[ParamKind]map[string]string

// Bind records that product identifier id abstracts to model value v.
func (b Binding) Bind(k ParamKind, id, v string) {
	if b[k] == nil {
		b[k] = map[string]string{}
	}
	b[k][id] = v
}

// Label returns the model action instance an event abstracts to, e.g.
// "StartSandbox(D1)".
func (b Binding) Label(e Event) (string, error) {
	kind, ok := Lookup(e.Model, e.Action)
	if !ok {
		return "", fmt.Errorf("trace: %s has no action %q in the vocabulary", e.Model, e.Action)
	}
	if len(e.Args) != len(kind.Params) {
		return "", fmt.Errorf("trace: %s takes %d parameters, event has %d", e.Action, len(kind.Params), len(e.Args))
	}
	if !kind.RecordedBy(e.Role) {
		return "", fmt.Errorf("trace: %s is recorded by %s, not %s", e.Action, kind.Role, e.Role)
	}
	vals := make([]string, len(e.Args))
	for i, id := range e.Args {
		v, ok := b[kind.Params[i]][id]
		if !ok {
			return "", fmt.Errorf("trace: %s %q is not bound to a model value", kind.Params[i], id)
		}
		vals[i] = v
	}
	return e.Action + "(" + strings.Join(vals, ", ") + ")", nil
}

// Project renders a model state as variable[key] -> value, parsing the
// TLA+ notation produced by the models' Format ("/\ v = k1 :> x @@ k2 :> y"
// or "/\ v = x").
func Project(formatted string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(formatted, "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "/\\ ")
		name, val, ok := strings.Cut(line, " = ")
		if !ok {
			continue
		}
		if !strings.Contains(val, " :> ") {
			out[name] = val
			continue
		}
		for _, pair := range strings.Split(val, " @@ ") {
			k, v, _ := strings.Cut(pair, " :> ")
			out[name+"["+strings.Trim(k, `"`)+"]"] = v
		}
	}
	return out
}

// MismatchError reports an observation that disagrees with the model.
type MismatchError struct {
	Seq      uint64
	Label    string
	Variable string
	Observed string
	Model    string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("trace: event %d (%s): observed %s = %s, model has %s", e.Seq, e.Label, e.Variable, e.Observed, e.Model)
}

// Replay checks that events, abstracted through b, form a behaviour of the
// spec from init: each event's action instance must be enabled, and when
// the event carries observations some successor of that action must agree
// with all of them. Invariants are checked on every state. It returns the
// model states visited.
func Replay[S any](sp *check.Spec[S], init S, b Binding, events []Event) ([]S, error) {
	if !sp.IsInit(init) {
		return nil, fmt.Errorf("trace: replay must start from an initial state")
	}
	states := []S{init}
	cur := init
	for _, e := range events {
		label, err := b.Label(e)
		if err != nil {
			return states, err
		}
		succ := sp.Successors(cur, label)
		if len(succ) == 0 {
			return states, &check.ReplayError{Index: int(e.Seq), Action: label, Reason: "action not enabled"}
		}
		next, ok := succ[0], len(e.Observed) == 0
		var mismatch *MismatchError
		for _, t := range succ {
			if m := compare(sp.Format(t), e, label); m == nil {
				next, ok = t, true
				break
			} else if mismatch == nil {
				mismatch = m
			}
		}
		if !ok {
			return states, mismatch
		}
		for _, inv := range sp.Invariants {
			if !inv.Holds(next) {
				return states, &check.ReplayError{Index: int(e.Seq), Action: label, Reason: "invariant " + inv.Name + " violated"}
			}
		}
		states = append(states, next)
		cur = next
	}
	return states, nil
}

func compare(formatted string, e Event, label string) *MismatchError {
	if len(e.Observed) == 0 {
		return nil
	}
	proj := Project(formatted)
	keys := make([]string, 0, len(e.Observed))
	for k := range e.Observed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if proj[k] != e.Observed[k] {
			return &MismatchError{Seq: e.Seq, Label: label, Variable: k, Observed: e.Observed[k], Model: proj[k]}
		}
	}
	return nil
}

// Recorder is implemented by HC and RS trace sinks.
type Recorder interface {
	Record(Event) error
}

// JSONLWriter records events as JSON Lines.
type JSONLWriter struct{ W io.Writer }

// Record writes e as one JSON line.
func (w JSONLWriter) Record(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = w.W.Write(append(b, '\n'))
	return err
}

// Read parses a JSON Lines trace.
func Read(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var e Event
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return out, fmt.Errorf("trace: line %d: %w", n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
