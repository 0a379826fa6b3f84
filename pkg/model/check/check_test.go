package check

import (
	"strings"
	"testing"
)

// counter is a toy model: x in 0..3; Inc (x < 3) is weakly fair when
// fairInc; Back (x = 2 -> 1) exists when back; Reset (x = 3 -> 0) is never
// fair.
func counter(fairInc, back bool) *Spec[int] {
	g := -1
	if fairInc {
		g = 0
	}
	sp := &Spec[int]{
		Name:      "counter",
		Actions:   []Action{{"Inc", g}, {"Back", -1}, {"Reset", -1}},
		Fairness:  []string{"Inc"},
		StateSize: 1,
		Init:      func(y func(int)) { y(0) },
		Next: func(x int, y func(int, int)) {
			if x < 3 {
				y(0, x+1)
			}
			if back && x == 2 {
				y(1, 1)
			}
			if x == 3 {
				y(2, 0)
			}
		},
		Encode: func(dst []byte, x int) { dst[0] = byte(x) },
		Decode: func(src []byte) int { return int(src[0]) },
	}
	return sp
}

func TestInvariantShortestTrace(t *testing.T) {
	sp := counter(true, true)
	sp.Invariants = []Invariant[int]{{"Below3", func(x int) bool { return x < 3 }}}
	res := Run(sp, Options{})
	v := res.First()
	if v == nil || v.Name != "Below3" {
		t.Fatalf("want Below3 violated, got %+v", res)
	}
	if got := len(v.Trace); got != 4 || v.Trace[3] != 3 {
		t.Fatalf("trace %v, want 0 1 2 3", v.Trace)
	}
	if strings.Join(v.Actions, ",") != "Init,Inc,Inc,Inc" {
		t.Fatalf("actions %v", v.Actions)
	}
}

func TestInvariantHolds(t *testing.T) {
	sp := counter(true, true)
	sp.Invariants = []Invariant[int]{{"InRange", func(x int) bool { return x >= 0 && x <= 3 }}}
	res := Run(sp, Options{Liveness: true})
	if res.Violated() || res.Distinct != 4 || res.Depth != 3 || !res.Complete {
		t.Fatalf("unexpected result %+v", res)
	}
}

func leadsTo(p, q func(int) bool) Property[int] {
	return Property[int]{Name: "P~>Q", Start: p, Avoid: func(x int) bool { return !q(x) }}
}

func is(v int) func(int) bool { return func(x int) bool { return x == v } }

func TestLivenessNeedsFairness(t *testing.T) {
	// Without fairness the behaviour may stutter at 0 forever.
	sp := counter(false, false)
	sp.Properties = []Property[int]{leadsTo(is(0), is(3))}
	v := Run(sp, Options{Liveness: true}).First()
	if v == nil || !v.Stutter {
		t.Fatalf("want stuttering counterexample, got %+v", v)
	}
	// With WF(Inc) it holds.
	sp = counter(true, false)
	sp.Properties = []Property[int]{leadsTo(is(0), is(3))}
	if res := Run(sp, Options{Liveness: true}); res.Violated() {
		t.Fatalf("unexpected violation: %s", res.First().String(nil))
	}
}

func TestLivenessFairCycle(t *testing.T) {
	// 1 -> 2 -> 1 takes Inc infinitely often, so it is weakly fair and
	// avoids 3 forever.
	sp := counter(true, true)
	sp.Properties = []Property[int]{leadsTo(is(0), is(3))}
	v := Run(sp, Options{Liveness: true}).First()
	if v == nil || v.Stutter || v.Loop < 0 {
		t.Fatalf("want cycle counterexample, got %+v", v)
	}
	if _, err := ReplayStates(sp, v.Trace); err != nil {
		t.Fatalf("counterexample is not a behaviour: %v", err)
	}
	if v.Trace[len(v.Trace)-1] != v.Trace[v.Loop] {
		t.Fatalf("lasso does not close: %v loop %d", v.Trace, v.Loop)
	}
	// P ~> (Q \/ <>[]R) with R = x \in {1,2}: the cycle stays in R, so the
	// property holds.
	sp.Properties = []Property[int]{{Name: "recur", Start: is(0), Avoid: func(x int) bool { return x != 3 },
		Recur: func(x int) bool { return x == 0 || x == 3 }}}
	if res := Run(sp, Options{Liveness: true}); res.Violated() {
		t.Fatalf("unexpected violation: %s", res.First().String(nil))
	}
}

func TestPersistenceFromInit(t *testing.T) {
	// (<>[](x # 3)) => <>(x = 3) from Init: the fair cycle 1,2,1,... stays
	// away from 3 forever.
	sp := counter(true, true)
	sp.Properties = []Property[int]{{Name: "persist", Avoid: func(x int) bool { return x != 3 },
		Cycle: func(x int) bool { return x != 3 }}}
	if v := Run(sp, Options{Liveness: true}).First(); v == nil {
		t.Fatal("want violation")
	}
	// If the initial state already satisfies the goal the property holds.
	sp.Properties = []Property[int]{{Name: "persist0", Avoid: func(x int) bool { return x != 0 },
		Cycle: func(x int) bool { return x != 0 }}}
	if res := Run(sp, Options{Liveness: true}); res.Violated() {
		t.Fatalf("unexpected violation")
	}
}

func TestBounds(t *testing.T) {
	sp := counter(false, false)
	sp.Properties = []Property[int]{leadsTo(is(0), is(3))}
	res := Run(sp, Options{MaxStates: 2, Liveness: true})
	if res.Complete || res.Liveness || res.Distinct != 2 || res.Violated() {
		t.Fatalf("bounded run: %+v", res)
	}
	res = Run(sp, Options{MaxDepth: 1, Liveness: true})
	if res.Complete || res.Liveness {
		t.Fatalf("depth-bounded run: %+v", res)
	}
}

func TestDeadlock(t *testing.T) {
	sp := counter(true, false)
	sp.Next = func(x int, y func(int, int)) {
		if x < 3 {
			y(0, x+1)
		}
	}
	res := Run(sp, Options{CheckDeadlock: true})
	if v := res.First(); v == nil || v.Kind != "deadlock" || v.Trace[len(v.Trace)-1] != 3 {
		t.Fatalf("want deadlock at 3, got %+v", res)
	}
}

func TestReplay(t *testing.T) {
	sp := counter(true, true)
	if _, err := ReplayStates(sp, []int{0, 1, 1, 2, 1, 2, 3, 0}); err != nil {
		t.Fatalf("legal trace rejected: %v", err)
	}
	if _, err := ReplayStates(sp, []int{0, 2}); err == nil {
		t.Fatal("illegal jump accepted")
	}
	if _, err := ReplayStates(sp, []int{1}); err == nil {
		t.Fatal("non-initial start accepted")
	}
	if _, err := ReplaySteps(sp, 0, []Step[int]{{Action: "Inc"}, {Action: "Reset"}}); err == nil {
		t.Fatal("disabled action accepted")
	}
	two := 2
	if _, err := ReplaySteps(sp, 0, []Step[int]{{Action: "Inc", State: &two}}); err == nil {
		t.Fatal("wrong recorded state accepted")
	}
}

func TestHashDistinguishes(t *testing.T) {
	seen := map[key][]byte{}
	buf := make([]byte, 3)
	for a := 0; a < 256; a++ {
		for b := 0; b < 256; b++ {
			buf[0], buf[1], buf[2] = byte(a), byte(b), byte(a^b)
			k := hash128(buf)
			if prev, ok := seen[k]; ok {
				t.Fatalf("collision between %v and %v", prev, buf)
			}
			seen[k] = append([]byte(nil), buf...)
		}
	}
}
