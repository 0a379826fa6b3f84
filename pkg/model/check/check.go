// Package check is an explicit-state model checker for the Go transcriptions
// of Lazaret's TLA+ models (tla/Lazaret.tla, tla/PreparedLower.tla).
//
// It explores the reachable state graph breadth first from the initial
// states, deduplicating states by a 128-bit hash of their canonical binary
// encoding, and checks every invariant on every distinct state. A violated
// invariant is reported with a shortest counterexample trace rebuilt from
// parent pointers. When exploration completes, liveness properties are
// checked on the explored graph under weak fairness: a property violation is
// a reachable lasso whose cycle is a strongly connected component that is
// fair for every weakly fair action group (each group is either disabled in
// some state of the component or taken on an edge inside it), or a state in
// which the behaviour may stutter forever because no fair group is enabled.
//
// The checker knows nothing about a particular model: a model supplies a
// Spec with its Init, its Next relation labelled by action instance, the
// fairness group of each action instance, a fixed-size canonical encoding,
// invariants and liveness properties.
package check

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"runtime"
	"strings"
	"time"
)

// Action describes one action instance of a model's Next relation, such as
// "StartSandbox(D1)". Group is the index in Spec.Fairness of the weakly fair
// disjunct the instance belongs to, or -1 when the instance is not fair.
type Action struct {
	Name  string
	Group int
}

// Invariant is a state predicate that must hold in every reachable state.
type Invariant[S any] struct {
	Name  string
	Holds func(S) bool
}

// Property is a liveness property in the normal form the models use.
//
// A behaviour violates the property when it reaches a state satisfying Start
// (or, when Start is nil, begins in an initial state) that satisfies Avoid,
// and from there stays in Avoid states forever, eventually staying in Cycle
// states (nil means Avoid) and visiting Recur states (nil means any state)
// infinitely often, while being weakly fair.
//
//   - P ~> Q is {Start: P, Avoid: ~Q}.
//   - P ~> (Q \/ <>[]R) is {Start: P, Avoid: ~Q, Recur: ~R}.
//   - (<>[]E) => <>G checked from Init is {Avoid: ~G, Cycle: E /\ ~G}.
//   - (<>[]E) => []<>G is {Start: TRUE, Avoid: E /\ ~G}.
type Property[S any] struct {
	Name  string
	Start func(S) bool
	Avoid func(S) bool
	Cycle func(S) bool
	Recur func(S) bool
}

// Spec is a model as the checker sees it.
type Spec[S any] struct {
	Name string
	// Actions lists every action instance; Next refers to them by index.
	Actions []Action
	// Fairness names the weakly fair groups (WF_vars(A) conjuncts of Spec).
	Fairness []string
	// StateSize is the exact length of every canonical encoding.
	StateSize int
	Init      func(yield func(S))
	// Next calls yield once per successor, with the index of the action
	// instance that produces it. Stuttering successors may be yielded; they
	// are ignored.
	Next       func(s S, yield func(action int, t S))
	Encode     func(dst []byte, s S)
	Decode     func(src []byte) S
	Format     func(S) string
	Invariants []Invariant[S]
	Properties []Property[S]
}

// Options bound and configure a run.
type Options struct {
	// MaxStates stops exploration after this many distinct states (0: none).
	MaxStates int
	// MaxDepth does not expand states at this BFS depth (0: none).
	MaxDepth int
	// Liveness enables liveness checking, which needs the explored graph's
	// edges to be kept in memory.
	Liveness bool
	// MaxHeapBytes stops exploration when the Go heap exceeds this many
	// bytes (0: no bound); checked every 65536 expanded states.
	MaxHeapBytes uint64
	// CheckDeadlock reports a state with no successor other than itself.
	CheckDeadlock bool
	// Progress, when non-nil, receives a progress line every ProgressEvery.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// Violation is a counterexample. For an invariant, Trace ends in the
// violating state and Loop is -1. For a liveness property, Trace is a lasso:
// the behaviour continues from the last state back to Trace[Loop] forever;
// Loop == len(Trace)-1 with Stutter set means the last state stutters.
type Violation[S any] struct {
	Kind    string // "invariant", "property" or "deadlock"
	Name    string
	Trace   []S
	Actions []string // Actions[i] leads from Trace[i-1] to Trace[i]; Actions[0] is "Init"
	Loop    int
	Stutter bool
}

// Result summarises a run.
type Result[S any] struct {
	Distinct int
	Edges    int
	// Generated counts every state produced, as TLC's "states generated"
	// does: each initial state and each successor of an explored state,
	// stuttering successors and duplicates included.
	Generated  int
	Depth      int
	Complete   bool   // false when a bound stopped exploration
	Bound      string // which bound stopped exploration, if any
	Deadlocks  int
	Duration   time.Duration
	Liveness   bool // liveness was checked on the complete graph
	Violations []*Violation[S]
	// Fired counts, per action instance, the non-stuttering edges it
	// produced (action coverage, as TLC's -coverage).
	Fired []int
}

// Violated reports whether the run found any violation.
func (r *Result[S]) Violated() bool { return len(r.Violations) > 0 }

// First returns the first violation or nil.
func (r *Result[S]) First() *Violation[S] {
	if len(r.Violations) == 0 {
		return nil
	}
	return r.Violations[0]
}

type key struct{ a, b uint64 }

// hash128 is a 128-bit hash of a canonical encoding: two independent 64-bit
// multiply-xorshift lanes over 8-byte words plus the length.
func hash128(p []byte) key {
	const m1, m2 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F
	a, b := uint64(0x243F6A8885A308D3)^uint64(len(p)), uint64(0x13198A2E03707344)^uint64(len(p))*m1
	for len(p) >= 8 {
		w := binary.LittleEndian.Uint64(p)
		a = bits.RotateLeft64(a^w*m1, 29) * m2
		b = bits.RotateLeft64(b^w*m2, 31) * m1
		p = p[8:]
	}
	var w uint64
	for i, c := range p {
		w |= uint64(c) << (8 * i)
	}
	a = bits.RotateLeft64(a^w*m1, 29) * m2
	b = bits.RotateLeft64(b^w*m2, 31) * m1
	a ^= a >> 33
	a *= m1
	a ^= a >> 29
	b ^= b >> 32
	b *= m2
	b ^= b >> 31
	return key{a, b}
}

const pageStates = 1 << 16

// graph is the explored state graph.
type graph struct {
	size     int
	pages    [][]byte
	parent   []uint32
	via      []uint16
	depth    []uint8
	inits    int
	enabled  []uint64 // fair groups enabled (non-stuttering) in each state
	start    []uint64 // edge offsets, len = expanded+1 (liveness only)
	target   []uint32
	edgeAct  []uint16
	expanded int
}

func (g *graph) n() int { return len(g.parent) }

func (g *graph) bytes(id uint32) []byte {
	p := g.pages[int(id)/pageStates]
	off := (int(id) % pageStates) * g.size
	return p[off : off+g.size]
}

func (g *graph) add(enc []byte) uint32 {
	id := len(g.parent)
	if id%pageStates == 0 {
		g.pages = append(g.pages, make([]byte, 0, pageStates*g.size))
	}
	last := len(g.pages) - 1
	g.pages[last] = append(g.pages[last], enc...)
	return uint32(id)
}

// table is the visited-state set: open addressing over the 128-bit hash of
// each canonical encoding. A slot holds the state id + 1 (0 is empty) and
// the high 32 bits of the hash's second lane as a fingerprint; a probe hit
// is confirmed by comparing the stored encoding byte for byte, so the set is
// exact (hash collisions cost a comparison, never a lost state).
type table struct {
	slots []uint64 // id+1 in the low 32 bits, fingerprint in the high 32
	n     int
}

func (t *table) grow(g *graph) {
	old := t.slots
	size := 1 << 16
	if len(old) > 0 {
		size = len(old) * 2
	}
	t.slots = make([]uint64, size)
	mask := uint64(size - 1)
	for _, sl := range old {
		if sl == 0 {
			continue
		}
		k := hash128(g.bytes(uint32(sl&0xFFFFFFFF) - 1))
		for i := k.a & mask; ; i = (i + 1) & mask {
			if t.slots[i] == 0 {
				t.slots[i] = sl
				break
			}
		}
	}
}

// lookup returns the id of enc if present; otherwise the slot to fill.
func (t *table) lookup(g *graph, enc []byte, k key) (id uint32, found bool, slot uint64) {
	mask := uint64(len(t.slots) - 1)
	fp := k.b >> 32
	for i := k.a & mask; ; i = (i + 1) & mask {
		sl := t.slots[i]
		if sl == 0 {
			return 0, false, i
		}
		if sl>>32 == fp {
			id := uint32(sl&0xFFFFFFFF) - 1
			if string(g.bytes(id)) == string(enc) {
				return id, true, i
			}
		}
	}
}

// Checker holds one exploration.
type Checker[S any] struct {
	spec *Spec[S]
	opt  Options
	g    graph
	seen table
}

// Run explores spec under opt and returns the result. Exploration stops at
// the first invariant or deadlock violation; liveness is checked only when
// exploration completed without a safety violation.
func Run[S any](spec *Spec[S], opt Options) *Result[S] {
	c := &Checker[S]{spec: spec, opt: opt}
	return c.run()
}

func (c *Checker[S]) run() *Result[S] {
	t0 := time.Now()
	sp := c.spec
	if len(sp.Actions) > 1<<16-1 {
		panic("check: too many action instances")
	}
	if len(sp.Fairness) > 64 {
		panic("check: too many fairness groups")
	}
	res := &Result[S]{Complete: true, Fired: make([]int, len(sp.Actions))}
	c.g.size = sp.StateSize
	enc := make([]byte, sp.StateSize)
	var violation *Violation[S]

	checkInv := func(id uint32, s S) bool {
		for _, inv := range sp.Invariants {
			if !inv.Holds(s) {
				violation = c.trace(id, "invariant", inv.Name)
				return false
			}
		}
		return true
	}
	insert := func(s S, parent uint32, via uint16, depth uint8) (uint32, bool, bool) {
		clear(enc)
		sp.Encode(enc, s)
		k := hash128(enc)
		if 2*(c.seen.n+1) > len(c.seen.slots) {
			c.seen.grow(&c.g)
		}
		old, found, slot := c.seen.lookup(&c.g, enc, k)
		if found {
			return old, false, true
		}
		if c.opt.MaxStates > 0 && c.g.n() >= c.opt.MaxStates {
			res.Complete = false
			res.Bound = "max states"
			return 0, false, false
		}
		id := c.g.add(enc)
		c.seen.slots[slot] = uint64(id+1) | (k.b>>32)<<32
		c.seen.n++
		c.g.parent = append(c.g.parent, parent)
		c.g.via = append(c.g.via, via)
		c.g.depth = append(c.g.depth, depth)
		return id, true, true
	}

	sp.Init(func(s S) {
		if violation != nil {
			return
		}
		res.Generated++
		id, fresh, _ := insert(s, ^uint32(0), ^uint16(0), 0)
		if fresh {
			checkInv(id, s)
		}
	})
	c.g.inits = c.g.n()
	lastReport := time.Now()
	live := c.opt.Liveness
	if live {
		c.g.start = append(c.g.start, 0)
	}
	for i := 0; i < c.g.n() && violation == nil; i++ {
		id := uint32(i)
		d := c.g.depth[i]
		if int(d) > res.Depth {
			res.Depth = int(d)
		}
		if c.opt.MaxHeapBytes > 0 && i%65536 == 0 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > c.opt.MaxHeapBytes {
				res.Complete = false
				res.Bound = fmt.Sprintf("heap %d MiB above the bound", ms.HeapAlloc>>20)
				break
			}
		}
		if c.opt.MaxDepth > 0 && int(d) >= c.opt.MaxDepth {
			res.Complete = false
			res.Bound = "max depth"
			if live {
				c.g.enabled = append(c.g.enabled, 0)
				c.g.start = append(c.g.start, uint64(len(c.g.target)))
			}
			continue
		}
		if d == 255 {
			panic("check: depth above 255")
		}
		s := sp.Decode(c.g.bytes(id))
		var en uint64
		succ := 0
		sp.Next(s, func(a int, t S) {
			if violation != nil {
				return
			}
			res.Generated++
			tid, fresh, ok := insert(t, id, uint16(a), d+1)
			if !ok {
				return
			}
			if tid == id {
				return // stuttering step
			}
			succ++
			res.Fired[a]++
			if gr := sp.Actions[a].Group; gr >= 0 {
				en |= 1 << uint(gr)
			}
			if live {
				c.g.target = append(c.g.target, tid)
				c.g.edgeAct = append(c.g.edgeAct, uint16(a))
			}
			res.Edges++
			if fresh {
				checkInv(tid, t)
			}
		})
		if live {
			c.g.enabled = append(c.g.enabled, en)
			c.g.start = append(c.g.start, uint64(len(c.g.target)))
		}
		c.g.expanded = i + 1
		if succ == 0 && violation == nil {
			res.Deadlocks++
			if c.opt.CheckDeadlock {
				violation = c.trace(id, "deadlock", "Deadlock")
			}
		}
		if c.opt.Progress != nil && time.Since(lastReport) >= c.opt.ProgressEvery {
			lastReport = time.Now()
			fmt.Fprintf(c.opt.Progress, "%s: %d distinct, %d expanded, depth %d, %s\n",
				sp.Name, c.g.n(), i+1, d, time.Since(t0).Round(time.Second))
		}
	}
	res.Distinct = c.g.n()
	if violation != nil {
		res.Violations = append(res.Violations, violation)
		res.Complete = false
	}
	if live && res.Complete {
		res.Liveness = true
		for _, p := range sp.Properties {
			if v := c.liveness(p); v != nil {
				res.Violations = append(res.Violations, v)
			}
		}
	}
	res.Duration = time.Since(t0)
	return res
}

func (c *Checker[S]) state(id uint32) S { return c.spec.Decode(c.g.bytes(id)) }

// pathTo returns the BFS-tree path from an initial state to id.
func (c *Checker[S]) pathTo(id uint32) (ids []uint32, acts []string) {
	for {
		ids = append(ids, id)
		if c.g.parent[id] == ^uint32(0) {
			acts = append(acts, "Init")
			break
		}
		acts = append(acts, c.spec.Actions[c.g.via[id]].Name)
		id = c.g.parent[id]
	}
	for i, j := 0, len(ids)-1; i < j; i, j = i+1, j-1 {
		ids[i], ids[j] = ids[j], ids[i]
		acts[i], acts[j] = acts[j], acts[i]
	}
	return ids, acts
}

func (c *Checker[S]) trace(id uint32, kind, name string) *Violation[S] {
	ids, acts := c.pathTo(id)
	v := &Violation[S]{Kind: kind, Name: name, Actions: acts, Loop: -1}
	for _, x := range ids {
		v.Trace = append(v.Trace, c.state(x))
	}
	return v
}

// String renders a violation as a readable counterexample.
func (v *Violation[S]) String(format func(S) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s violated; counterexample of %d states:\n", v.Kind, v.Name, len(v.Trace))
	for i, s := range v.Trace {
		mark := ""
		if i == v.Loop {
			mark = "  <- cycle returns here"
		}
		fmt.Fprintf(&b, "State %d: <%s>%s\n", i+1, v.Actions[i], mark)
		if format != nil {
			b.WriteString(format(s))
		} else {
			fmt.Fprintf(&b, "%+v", s)
		}
		b.WriteString("\n")
	}
	switch {
	case v.Stutter:
		b.WriteString("Stuttering forever (no fair action enabled).\n")
	case v.Loop >= 0:
		fmt.Fprintf(&b, "Back to state %d.\n", v.Loop+1)
	}
	return b.String()
}
