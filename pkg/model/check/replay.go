package check

import (
	"bytes"
	"fmt"
)

// Step is one step of a trace to replay: the name of the action instance
// that was taken (as in Spec.Actions) and, optionally, the abstract state it
// must produce.
type Step[S any] struct {
	Action string
	State  *S
}

// ReplayError reports where and why a trace left the Next relation.
type ReplayError struct {
	Index  int // index of the offending step
	Action string
	Reason string
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("step %d (%s): %s", e.Index, e.Action, e.Reason)
}

func (sp *Spec[S]) equal(a, b S) bool {
	ea, eb := make([]byte, sp.StateSize), make([]byte, sp.StateSize)
	sp.Encode(ea, a)
	sp.Encode(eb, b)
	return bytes.Equal(ea, eb)
}

// IsInit reports whether s is an initial state.
func (sp *Spec[S]) IsInit(s S) bool {
	ok := false
	sp.Init(func(i S) {
		if sp.equal(i, s) {
			ok = true
		}
	})
	return ok
}

// Successors returns the successors of s produced by the named action
// instance (stuttering successors included).
func (sp *Spec[S]) Successors(s S, action string) []S {
	var out []S
	sp.Next(s, func(a int, t S) {
		if sp.Actions[a].Name == action {
			out = append(out, t)
		}
	})
	return out
}

// ReplayStates checks that states is a behaviour prefix of the spec: the
// first state is initial and every later state is a Next successor of its
// predecessor or equal to it (a stuttering step). It also checks every
// invariant on every state. It returns the labels of the actions that
// explain each step.
func ReplayStates[S any](sp *Spec[S], states []S) ([]string, error) {
	if len(states) == 0 {
		return nil, &ReplayError{Index: 0, Reason: "empty trace"}
	}
	if !sp.IsInit(states[0]) {
		return nil, &ReplayError{Index: 0, Action: "Init", Reason: "not an initial state"}
	}
	labels := []string{"Init"}
	for i := 1; i < len(states); i++ {
		if err := sp.checkInvariants(i-1, states[i-1]); err != nil {
			return labels, err
		}
		if sp.equal(states[i-1], states[i]) {
			labels = append(labels, "Stutter")
			continue
		}
		label := ""
		sp.Next(states[i-1], func(a int, t S) {
			if label == "" && sp.equal(t, states[i]) {
				label = sp.Actions[a].Name
			}
		})
		if label == "" {
			return labels, &ReplayError{Index: i, Reason: "no action of Next leads to this state"}
		}
		labels = append(labels, label)
	}
	return labels, sp.checkInvariants(len(states)-1, states[len(states)-1])
}

func (sp *Spec[S]) checkInvariants(i int, s S) error {
	for _, inv := range sp.Invariants {
		if !inv.Holds(s) {
			return &ReplayError{Index: i, Reason: "invariant " + inv.Name + " violated"}
		}
	}
	return nil
}

// ReplaySteps replays named actions from the initial state init (which
// must be initial). Each action must be enabled and, when the step carries a
// state, produce exactly that state; when it does not and the action has
// several successors the first is taken. Invariants are checked on every
// state. The visited states are returned.
func ReplaySteps[S any](sp *Spec[S], init S, steps []Step[S]) ([]S, error) {
	if !sp.IsInit(init) {
		return nil, &ReplayError{Index: 0, Action: "Init", Reason: "not an initial state"}
	}
	states := []S{init}
	cur := init
	for i, st := range steps {
		if err := sp.checkInvariants(i, cur); err != nil {
			return states, err
		}
		succ := sp.Successors(cur, st.Action)
		if len(succ) == 0 {
			return states, &ReplayError{Index: i + 1, Action: st.Action, Reason: "action not enabled"}
		}
		next := succ[0]
		if st.State != nil {
			found := false
			for _, t := range succ {
				if sp.equal(t, *st.State) {
					next, found = t, true
					break
				}
			}
			if !found {
				return states, &ReplayError{Index: i + 1, Action: st.Action, Reason: "action enabled but does not produce the recorded state"}
			}
		}
		states = append(states, next)
		cur = next
	}
	return states, sp.checkInvariants(len(steps), cur)
}

// Only returns a copy of sp that checks a single property: the invariant
// called name, or every instance (name or name[...]) of the liveness
// property called name, with no other invariant or property. kind is
// "invariant" or "property"; ok is false when sp has no such property.
// Checking one property alone shows that it, and not another property that
// a defect happens to violate first, catches the defect.
func Only[S any](sp *Spec[S], name string) (only *Spec[S], kind string, ok bool) {
	c := *sp
	c.Invariants, c.Properties = nil, nil
	for _, inv := range sp.Invariants {
		if inv.Name == name {
			c.Invariants = append(c.Invariants, inv)
			return &c, "invariant", true
		}
	}
	for _, p := range sp.Properties {
		if p.Name == name || (len(p.Name) > len(name) && p.Name[:len(name)+1] == name+"[") {
			c.Properties = append(c.Properties, p)
		}
	}
	return &c, "property", len(c.Properties) > 0
}

// Confirm checks that v, reported by checking only (a spec from Only) for
// a property of kind, is a real counterexample: of that kind, a behaviour
// of only's actions, ending in a state that falsifies the invariant, or,
// for a liveness property, a lasso that closes (compared by format).
func Confirm[S any](only *Spec[S], kind string, v *Violation[S], format func(S) string) error {
	if v.Kind != kind || len(v.Trace) == 0 {
		return fmt.Errorf("want a %s counterexample, got %s %s with %d states", kind, v.Kind, v.Name, len(v.Trace))
	}
	beh := *only
	beh.Invariants, beh.Properties = nil, nil
	if _, err := ReplayStates(&beh, v.Trace); err != nil {
		return fmt.Errorf("counterexample is not a behaviour: %w", err)
	}
	last := v.Trace[len(v.Trace)-1]
	if kind == "invariant" && only.Invariants[0].Holds(last) {
		return fmt.Errorf("the last state of the counterexample satisfies %s", only.Invariants[0].Name)
	}
	if kind == "property" && !v.Stutter && v.Loop >= 0 && format(last) != format(v.Trace[v.Loop]) {
		return fmt.Errorf("lasso does not close")
	}
	return nil
}
