package check

// Liveness checking on the explored graph.
//
// For a Property {Start, Avoid, Cycle, Recur}, let X be the Avoid states and
// Y the Cycle states (Y ⊆ X). A violating behaviour is a reachable Start ∧ X
// state, a path through X states to a "bad" Y state, where a Y state is bad
// when
//
//   - it lies in a non-trivial strongly connected component C of the
//     subgraph induced by Y, C contains a Recur state, and C is weakly fair:
//     for every fairness group, some state of C has the group disabled or
//     some edge inside C belongs to the group (a cycle through every state
//     and edge of C is then a fair behaviour), or
//   - it satisfies Recur and no fairness group is enabled in it, so the
//     behaviour may stutter there forever.
//
// Stuttering self-loops are not edges of the graph; a fair group is enabled
// in a state when it has a successor other than the state itself.

type bitset []uint64

func newBits(n int) bitset         { return make(bitset, (n+63)/64) }
func (b bitset) get(i uint32) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i uint32)      { b[i/64] |= 1 << (i % 64) }

func (c *Checker[S]) predicate(f func(S) bool, dflt bitset) bitset {
	if f == nil {
		return dflt
	}
	n := c.g.n()
	b := newBits(n)
	for i := 0; i < n; i++ {
		if f(c.state(uint32(i))) {
			b.set(uint32(i))
		}
	}
	return b
}

func (c *Checker[S]) edges(u uint32) (lo, hi uint64) { return c.g.start[u], c.g.start[u+1] }

func (c *Checker[S]) liveness(p Property[S]) *Violation[S] {
	n := c.g.n()
	all := newBits(n)
	for i := 0; i < n; i++ {
		all.set(uint32(i))
	}
	X := c.predicate(p.Avoid, all)
	Y := c.predicate(p.Cycle, X)
	if p.Cycle != nil {
		for i := range Y {
			Y[i] &= X[i]
		}
	}
	Z := c.predicate(p.Recur, all)
	var starts []uint32
	if p.Start == nil {
		for i := 0; i < c.g.inits; i++ {
			if X.get(uint32(i)) {
				starts = append(starts, uint32(i))
			}
		}
	} else {
		st := c.predicate(p.Start, nil)
		for i := 0; i < n; i++ {
			if st.get(uint32(i)) && X.get(uint32(i)) {
				starts = append(starts, uint32(i))
			}
		}
	}
	if len(starts) == 0 {
		return nil
	}
	nf := len(c.spec.Fairness)
	fairMask := uint64(1)<<uint(nf) - 1
	if nf == 64 {
		fairMask = ^uint64(0)
	}
	comp := c.scc(Y)
	// Evaluate each component.
	type info struct {
		size     int
		recur    bool
		disabled uint64 // groups disabled somewhere in the component
		taken    uint64 // groups taken on an internal edge
	}
	infos := map[int32]*info{}
	for i := 0; i < n; i++ {
		u := uint32(i)
		if !Y.get(u) {
			continue
		}
		in := infos[comp[u]]
		if in == nil {
			in = &info{}
			infos[comp[u]] = in
		}
		in.size++
		if Z.get(u) {
			in.recur = true
		}
		in.disabled |= ^c.g.enabled[u] & fairMask
		lo, hi := c.edges(u)
		for e := lo; e < hi; e++ {
			v := c.g.target[e]
			if v != u && Y.get(v) && comp[v] == comp[u] {
				if gr := c.spec.Actions[c.g.edgeAct[e]].Group; gr >= 0 {
					in.taken |= 1 << uint(gr)
				}
			}
		}
	}
	bad := func(u uint32) (badSCC, stutter bool) {
		if !Y.get(u) {
			return false, false
		}
		if Z.get(u) && c.g.enabled[u]&fairMask == 0 {
			return false, true
		}
		in := infos[comp[u]]
		if in.size > 1 && in.recur && (in.disabled|in.taken)&fairMask == fairMask {
			return true, false
		}
		return false, false
	}
	// Forward search from the start states within X.
	par := make(map[uint32]uint32)
	visited := newBits(n)
	queue := make([]uint32, 0, len(starts))
	for _, s := range starts {
		if !visited.get(s) {
			visited.set(s)
			par[s] = s
			queue = append(queue, s)
		}
	}
	for qi := 0; qi < len(queue); qi++ {
		u := queue[qi]
		if b, st := bad(u); b || st {
			return c.lasso(p.Name, u, par, st, Y, Z, comp)
		}
		lo, hi := c.edges(u)
		for e := lo; e < hi; e++ {
			v := c.g.target[e]
			if X.get(v) && !visited.get(v) {
				visited.set(v)
				par[v] = u
				queue = append(queue, v)
			}
		}
	}
	return nil
}

// scc labels the strongly connected components of the subgraph induced by Y
// (iterative Tarjan). States outside Y get -1.
func (c *Checker[S]) scc(Y bitset) []int32 {
	n := c.g.n()
	comp := make([]int32, n)
	index := make([]int32, n)
	low := make([]int32, n)
	for i := range comp {
		comp[i] = -1
		index[i] = -1
	}
	onStack := newBits(n)
	var stack []uint32
	type frame struct {
		u uint32
		e uint64
	}
	var call []frame
	next := int32(0)
	ncomp := int32(0)
	for root := 0; root < n; root++ {
		r := uint32(root)
		if !Y.get(r) || index[r] >= 0 {
			continue
		}
		index[r], low[r] = next, next
		next++
		stack = append(stack, r)
		onStack.set(r)
		lo, _ := c.edges(r)
		call = append(call, frame{r, lo})
		for len(call) > 0 {
			f := &call[len(call)-1]
			u := f.u
			_, hi := c.edges(u)
			pushed := false
			for f.e < hi {
				v := c.g.target[f.e]
				f.e++
				if v == u || !Y.get(v) {
					continue
				}
				if index[v] < 0 {
					index[v], low[v] = next, next
					next++
					stack = append(stack, v)
					onStack.set(v)
					vlo, _ := c.edges(v)
					call = append(call, frame{v, vlo})
					pushed = true
					break
				} else if onStack.get(v) && index[v] < low[u] {
					low[u] = index[v]
				}
			}
			if pushed {
				continue
			}
			if low[u] == index[u] {
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w/64] &^= 1 << (w % 64)
					comp[w] = ncomp
					if w == u {
						break
					}
				}
				ncomp++
			}
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].u
				if low[u] < low[p] {
					low[p] = low[u]
				}
			}
		}
	}
	return comp
}

// lasso builds a counterexample: init -> start (BFS tree), start -> entry
// (within X), then a fair cycle inside the component of entry.
func (c *Checker[S]) lasso(name string, entry uint32, par map[uint32]uint32, stutter bool, Y, Z bitset, comp []int32) *Violation[S] {
	var mid []uint32
	for u := entry; ; u = par[u] {
		mid = append(mid, u)
		if par[u] == u {
			break
		}
	}
	for i, j := 0, len(mid)-1; i < j; i, j = i+1, j-1 {
		mid[i], mid[j] = mid[j], mid[i]
	}
	prefix, acts := c.pathTo(mid[0])
	ids := append([]uint32{}, prefix...)
	for i := 1; i < len(mid); i++ {
		ids = append(ids, mid[i])
		acts = append(acts, c.edgeName(mid[i-1], mid[i]))
	}
	v := &Violation[S]{Kind: "property", Name: name}
	if stutter {
		v.Loop = len(ids) - 1
		v.Stutter = true
	} else {
		v.Loop = len(ids) - 1
		cyc, cacts := c.fairCycle(entry, Y, Z, comp)
		ids = append(ids, cyc...)
		acts = append(acts, cacts...)
	}
	v.Actions = acts
	for _, x := range ids {
		v.Trace = append(v.Trace, c.state(x))
	}
	return v
}

func (c *Checker[S]) edgeName(u, v uint32) string {
	lo, hi := c.edges(u)
	for e := lo; e < hi; e++ {
		if c.g.target[e] == v {
			return c.spec.Actions[c.g.edgeAct[e]].Name
		}
	}
	return "?"
}

// fairCycle returns the states after entry of a cycle inside entry's
// component that visits a Recur state and, for every fairness group, a
// state where the group is disabled or an edge of the group, ending at entry.
func (c *Checker[S]) fairCycle(entry uint32, Y, Z bitset, comp []int32) ([]uint32, []string) {
	cid := comp[entry]
	in := func(v uint32) bool { return Y.get(v) && comp[v] == cid }
	nf := len(c.spec.Fairness)
	var ids []uint32
	var acts []string
	cur := entry
	// walk moves cur to the nearest state satisfying goal (BFS within the
	// component); if edgeGroup >= 0 the goal is to take an edge of that group.
	walk := func(goal func(uint32) bool, edgeGroup int) {
		par := map[uint32]uint32{cur: cur}
		parAct := map[uint32]string{}
		q := []uint32{cur}
		var hit uint32
		found := false
		if edgeGroup < 0 && goal(cur) {
			return
		}
		for qi := 0; qi < len(q) && !found; qi++ {
			u := q[qi]
			lo, hi := c.edges(u)
			for e := lo; e < hi; e++ {
				v := c.g.target[e]
				if v == u || !in(v) {
					continue
				}
				a := c.spec.Actions[c.g.edgeAct[e]]
				if edgeGroup >= 0 && a.Group == edgeGroup {
					// take this edge from u: path cur..u then u->v
					path := []uint32{}
					pacts := []string{}
					for x := u; x != cur; x = par[x] {
						path = append(path, x)
						pacts = append(pacts, parAct[x])
					}
					for i := len(path) - 1; i >= 0; i-- {
						ids = append(ids, path[i])
						acts = append(acts, pacts[i])
					}
					ids = append(ids, v)
					acts = append(acts, a.Name)
					cur = v
					return
				}
				if _, ok := par[v]; ok {
					continue
				}
				par[v] = u
				parAct[v] = a.Name
				if edgeGroup < 0 && goal(v) {
					hit, found = v, true
					break
				}
				q = append(q, v)
			}
		}
		if !found {
			return
		}
		path := []uint32{}
		pacts := []string{}
		for x := hit; x != cur; x = par[x] {
			path = append(path, x)
			pacts = append(pacts, parAct[x])
		}
		for i := len(path) - 1; i >= 0; i-- {
			ids = append(ids, path[i])
			acts = append(acts, pacts[i])
		}
		cur = hit
	}
	walk(func(v uint32) bool { return Z.get(v) }, -1)
	for gr := 0; gr < nf; gr++ {
		bit := uint64(1) << uint(gr)
		hasDisabled := false
		for i := range comp { // small components in practice; bounded by n
			u := uint32(i)
			if in(u) && c.g.enabled[u]&bit == 0 {
				hasDisabled = true
				break
			}
		}
		if hasDisabled {
			walk(func(v uint32) bool { return c.g.enabled[v]&bit == 0 }, -1)
		} else {
			walk(nil, gr)
		}
	}
	// Close the cycle: return to entry; a non-trivial component always
	// needs at least one step.
	if cur == entry && len(ids) == 0 {
		lo, hi := c.edges(entry)
		for e := lo; e < hi; e++ {
			v := c.g.target[e]
			if v != entry && in(v) {
				ids = append(ids, v)
				acts = append(acts, c.spec.Actions[c.g.edgeAct[e]].Name)
				cur = v
				break
			}
		}
	}
	if cur != entry {
		walk(func(v uint32) bool { return v == entry }, -1)
	}
	return ids, acts
}
