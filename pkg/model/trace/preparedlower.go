package trace

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lazaret/lazaret/pkg/model/check"
	pl "github.com/lazaret/lazaret/pkg/model/preparedlower"
	"github.com/lazaret/lazaret/pkg/modeltrace"
)

// PLReplay is the replay of a trace's PreparedLower records.
type PLReplay struct {
	// Steps are the model action instances the records were explained by,
	// with the product identifier each model value stands for, plus
	// inferred environment steps ("inferred: ...") and reconcile steps
	// found already done ("stutter: ...").
	Steps []string
	// Generations and Artifacts list the product identifiers replayed
	// (Domain/generation keys, prepared-artifact IDs), in order of
	// appearance.
	Generations, Artifacts []string
	// Recycled counts generation slots reused after their generation
	// reached Done; Evicted artifact slots given to another artifact.
	Recycled, Evicted int
	// Open lists the generations that did not reach Done, with their
	// model phase (a generation whose records recovery retained).
	Open []string
}

// plEnvironment are the environment actions the PreparedLower replay may
// infer: the deaths no live process records (a coordinator SIGKILLed, a
// preparer that died or failed mid-preparation).
var plEnvironmentGen = []string{"HardLoseHostCoordinator", "HardLoseSupervisor"}

// plInferAt are the records before which the replay searches for those
// environment steps: the steps whose guard is a death (the lock-holding
// bootstrap coordinator after its predecessor's; the supervisor's
// lease-loss teardown after its coordinator's; the settlement of a dead
// preparer's intent).
var plInferAt = map[string]bool{"BootstrapRecoveryCoordinator": true, "LeaseLossUnmount": true, "LeaseLossExit": true, "RecoverStage": true}

// plReconciled decides, for each recovery action a coordinator may record
// as a reconcile step, whether the model state already has every value
// the action assigns (then the record is a stuttering step).
var plReconciled = map[string]func(st *pl.State, x int) bool{
	// A bootstrap coordinator continuing a recovery its predecessor
	// began (and died in): hc Alive, phase Recovering already.
	"BootstrapRecoveryCoordinator": func(st *pl.State, x int) bool { return st.Hc[x] == pl.HcAlive && st.Phase[x] == pl.Recovering },
	// The mount died with the supervisor's mount namespace, or its
	// lease-loss teardown unmounted it.
	"RecoveryUnmountAnchor": func(st *pl.State, x int) bool { return st.Mount[x] == pl.MountAbsent },
	// The supervisor was never staged (the generation failed before).
	"ClearSupervisorSlot": func(st *pl.State, x int) bool { return st.RsSlot[x] == pl.Unassigned },
}

// ReplayPreparedLower replays a trace's PreparedLower records (in file
// order; the trace's linearisation) through PreparedLower.tla's Next
// relation, all Domains together: generations of different Domains share
// the Storage Catalog's artifacts and leases.
//
// The abstraction: each prepared-artifact ID is a model artifact (A1…),
// each (Domain, generation) a model generation (G1…) whose GenArtifact is
// the artifact its records name (the fact modeltrace.FactArtifact, or the
// preparation its supervisor ran). The catalog state at the trace's
// beginning is what its records imply: an artifact whose first record is
// not BeginPrepare was published before (Published, its tree present).
// The fixed-size state holds pl.MaxArtifacts artifacts and
// pl.MaxGenerations generations: a generation that reached Done is
// recycled (its slot reset to the initial values for the next generation
// to appear: Done is clean, DoneIsClean, so no lease or record of it
// remains in the state). An idle artifact — Absent or Published, no
// preparer, no stage tree, no lease, no unfinished generation leasing it —
// is evicted when a slot is needed and restored as it was when its next
// record comes: only its own actions read or write its variables while no
// generation leases it, so the replay is the model's behaviour projected
// on the artifacts in use.
// A later reconcile record of a recycled generation is a stutter (a
// bootstrap finding it done); any other record of it is rejected.
//
// Every record must be an enabled action instance whose successor keeps
// every invariant, except: a reconcile record whose values the state
// already has is a stutter (plReconciled); and before the records of
// plInferAt the replay searches for at most three environment steps of
// the record's own generation (HardLoseHostCoordinator,
// HardLoseSupervisor) or artifact (PreparerCrash) after which it is
// enabled, each intermediate state keeping the invariants. The first
// record that is not explained is reported as a *RejectError.
func ReplayPreparedLower(recs []modeltrace.Record) (PLReplay, error) {
	r := &plReplayer{inc: incarnations{}, genSlot: map[string]int{}, artSlot: map[string]int{}, genArt: map[string]string{},
		firstArt: map[string]string{}, seenArt: map[string]bool{}, retired: map[string]bool{}, saved: map[string]uint8{}}
	r.cfg = &pl.Config{Name: "trace", MaxFaults: 250, MaxReclaims: 250}
	r.m = &pl.Model{C: r.cfg}
	r.inv = r.m.Invariants()
	r.st.Trees = pl.Foreign
	r.st.Faults, r.st.Reclaims = 250, 250
	var mine []modeltrace.Record
	scan := incarnations{}
	for _, rec := range recs {
		if rec.Model != modeltrace.PreparedLower {
			continue
		}
		mine = append(mine, rec)
		if pl.ArtifactAction(rec.Action) {
			if len(rec.Args) == 1 {
				if _, ok := r.firstArt[rec.Args[0]]; !ok {
					r.firstArt[rec.Args[0]] = rec.Action
				}
				if rec.Domain != "" && rec.Action == "BeginPrepare" {
					r.noteArt(scan.key(modeltrace.GenerationKey(rec.Domain, rec.Generation), ""), rec.Args[0])
				}
			}
			continue
		}
		if len(rec.Args) != 1 {
			continue
		}
		k := scan.key(rec.Args[0], rec.Action)
		if a := rec.Facts[modeltrace.FactArtifact]; a != "" {
			r.noteArt(k, a)
			if _, ok := r.firstArt[a]; !ok {
				r.firstArt[a] = rec.Action
			}
		}
	}
	for i, rec := range mine {
		if err := r.step(i, rec); err != nil {
			return r.rep, err
		}
	}
	for g, key := range r.slotGen {
		if r.st.Phase[g] != pl.Done {
			r.rep.Open = append(r.rep.Open, fmt.Sprintf("%s (G%d) is %s", key, g+1, strings.Trim(pl.PhaseName(r.st.Phase[g]), `"`)))
		}
	}
	return r.rep, nil
}

// incarnations names the incarnations of a generation key: a Domain's
// generation numbers restart when its Domain Store is removed (`lazaret
// rm`), so a record that can only begin a generation starts the key's
// next incarnation ("key#n"). A generation begins with SpawnSupervisor
// (its supervisor staged) or with AcquireLeaseIntent (the coordinator
// takes the lease's first steps ahead of the supervisor, once the
// generation is recorded): either, when its incarnation already recorded
// that action or FinishGeneration, starts the next one. The replay admits
// a new incarnation only once the previous one is Done (a second spawn or
// lease intent within one generation stays rejected: the model's guards
// need rs Absent and lower None); reconcile records (a bootstrap finding
// a generation done) stay with the incarnation they follow.
type incarnations map[string]*incarnation

type incarnation struct {
	n        int
	seen     map[string]bool // the beginning actions this incarnation recorded
	finished bool            // it recorded FinishGeneration
}

// beginsGeneration are the actions a generation's first PreparedLower
// record may be.
var beginsGeneration = map[string]bool{"SpawnSupervisor": true, "AcquireLeaseIntent": true}

func (in incarnations) key(key, action string) string {
	c := in[key]
	switch {
	case beginsGeneration[action]:
		if c == nil {
			c = &incarnation{seen: map[string]bool{}}
			in[key] = c
		} else if c.seen[action] || c.finished {
			c.n++
			c.seen, c.finished = map[string]bool{}, false
		}
		c.seen[action] = true
	case action == "FinishGeneration" && c != nil:
		c.finished = true
	}
	if c == nil || c.n == 0 {
		return key
	}
	return fmt.Sprintf("%s#%d", key, c.n)
}

type plReplayer struct {
	inc      incarnations
	m        *pl.Model
	cfg      *pl.Config
	st       pl.State
	inv      []check.Invariant[pl.State]
	genSlot  map[string]int // generation key -> slot
	slotGen  []string
	artSlot  map[string]int // artifact ID -> slot
	slotArt  []string
	genArt   map[string]string // generation key -> the artifact its records name
	firstArt map[string]string // artifact ID -> the action of its first record
	seenArt  map[string]bool
	retired  map[string]bool  // generation keys whose Done slot was recycled
	saved    map[string]uint8 // evicted idle artifacts' state (Absent or Published)
	rep      PLReplay
}

// incKey is key's current incarnation.
func (r *plReplayer) incKey(key string) string { return r.inc.key(key, "") }

func (r *plReplayer) noteArt(key, a string) {
	if _, ok := r.genArt[key]; !ok {
		r.genArt[key] = a
	}
}

// placeholder is the artifact of a generation whose records name none (it
// failed before its supervisor named one): it never leases.
const placeholder = "(none)"

func (r *plReplayer) allocArt(id string) (int, error) {
	if s, ok := r.artSlot[id]; ok {
		return s, nil
	}
	s := -1
	if len(r.slotArt) < pl.MaxArtifacts {
		s = len(r.slotArt)
		r.slotArt = append(r.slotArt, "")
		r.cfg.Artifacts = append(r.cfg.Artifacts, fmt.Sprintf("A%d", s+1))
	} else {
	search:
		for a := range r.slotArt {
			st := &r.st
			if (st.Artifact[a] != pl.ArtAbsent && st.Artifact[a] != pl.ArtPublished) || st.Preparer[a] != pl.PrepNone || st.Lease[a] != 0 || st.Trees&pl.StageTree(a) != 0 {
				continue
			}
			for g := range r.slotGen {
				if r.cfg.GenArtifact[g] == a && st.Phase[g] != pl.Done {
					continue search
				}
			}
			s = a
			delete(r.artSlot, r.slotArt[a])
			r.saved[r.slotArt[a]] = st.Artifact[a]
			r.rep.Evicted++
			break
		}
		if s < 0 {
			return 0, fmt.Errorf("the trace uses more than %d prepared artifacts at once (none idle to evict): beyond the PreparedLower model's bounds", pl.MaxArtifacts)
		}
	}
	r.slotArt[s] = id
	r.artSlot[id] = s
	st := &r.st
	st.Artifact[s], st.Preparer[s], st.Lease[s] = pl.ArtAbsent, pl.PrepNone, 0
	st.Trees &^= pl.StageTree(s) | pl.PubTree(s)
	if v, ok := r.saved[id]; ok {
		// Evicted idle: its own variables, as they were.
		delete(r.saved, id)
		if v == pl.ArtPublished {
			st.Artifact[s] = pl.ArtPublished
			st.Trees |= pl.PubTree(s)
		}
	} else if !r.seenArt[id] && id != placeholder && r.firstArt[id] != "BeginPrepare" {
		// Published before the trace began.
		st.Artifact[s] = pl.ArtPublished
		st.Trees |= pl.PubTree(s)
	}
	if !r.seenArt[id] {
		r.seenArt[id] = true
		r.rep.Artifacts = append(r.rep.Artifacts, id)
	}
	return s, nil
}

// allocGen returns key's slot, -1 for a generation recycled after Done.
func (r *plReplayer) allocGen(key string) (int, error) {
	if s, ok := r.genSlot[key]; ok {
		return s, nil
	}
	if r.retired[key] {
		return -1, nil
	}
	art := r.genArt[key]
	if art == "" {
		art = placeholder
		if len(r.slotArt) > 0 {
			art = r.slotArt[0]
		}
	}
	a, err := r.allocArt(art)
	if err != nil {
		return 0, err
	}
	s := -1
	if len(r.slotGen) < pl.MaxGenerations {
		s = len(r.slotGen)
		r.slotGen = append(r.slotGen, "")
		r.cfg.Generations = append(r.cfg.Generations, fmt.Sprintf("G%d", s+1))
		r.cfg.GenArtifact = append(r.cfg.GenArtifact, 0)
	} else {
		for g := range r.slotGen {
			if r.st.Phase[g] == pl.Done {
				s = g
				break
			}
		}
		if s < 0 {
			return 0, fmt.Errorf("the trace has more than %d unfinished generations at once (none Done to recycle): %w", pl.MaxGenerations, ErrBeyondBounds)
		}
		old := r.slotGen[s]
		delete(r.genSlot, old)
		r.retired[old] = true
		r.rep.Recycled++
	}
	r.slotGen[s] = key
	r.genSlot[key] = s
	r.cfg.GenArtifact[s] = a
	st := &r.st
	st.Phase[s], st.Hc[s], st.Rs[s], st.RsSlot[s] = pl.Starting, pl.HcAlive, pl.RsAbsent, pl.Unassigned
	st.Lower[s], st.Anchor[s], st.Mount[s] = pl.PNone, pl.PNone, pl.MountAbsent
	for x := range r.slotArt {
		st.Lease[x] &^= 1 << uint(s)
	}
	r.rep.Generations = append(r.rep.Generations, key)
	return s, nil
}

func (r *plReplayer) invariant(st pl.State) string {
	for _, inv := range r.inv {
		if !inv.Holds(st) {
			return inv.Name
		}
	}
	return ""
}

func (r *plReplayer) step(i int, rec modeltrace.Record) error {
	raw := rec.Action + "(" + strings.Join(rec.Args, ", ") + ")"
	reject := func(label, reason string) error {
		return &RejectError{Model: modeltrace.PreparedLower, Domain: rec.Domain, Line: i + 1, Record: rec, Label: label, Reason: reason,
			Preceding: append([]string(nil), r.rep.Steps...), State: r.m.Format(r.st)}
	}
	rejectErr := func(label string, err error) error {
		e := reject(label, err.Error()).(*RejectError)
		if errors.Is(err, ErrBeyondBounds) {
			e.Err = ErrBeyondBounds
		}
		return e
	}
	kind, ok := Lookup(rec.Model, rec.Action)
	if !ok {
		return reject(raw, "PreparedLower has no action "+rec.Action)
	}
	if !kind.RecordedBy(rec.Role) {
		return reject(raw, fmt.Sprintf("%s is recorded by %s, not %s", rec.Action, kind.Role, rec.Role))
	}
	if len(rec.Args) != 1 {
		return reject(raw, fmt.Sprintf("%s takes one parameter, the record has %d", rec.Action, len(rec.Args)))
	}
	artifactStep := pl.ArtifactAction(rec.Action)
	var x int
	var label string
	if artifactStep {
		if rec.Domain != "" {
			if _, err := r.allocGen(r.incKey(modeltrace.GenerationKey(rec.Domain, rec.Generation))); err != nil {
				return rejectErr(raw, err)
			}
		}
		s, err := r.allocArt(rec.Args[0])
		if err != nil {
			return rejectErr(raw, err)
		}
		x = s
		label = fmt.Sprintf("%s(%s = %s)", rec.Action, r.cfg.Artifacts[x], rec.Args[0])
	} else {
		if rec.Domain == "" || rec.Args[0] != modeltrace.GenerationKey(rec.Domain, rec.Generation) {
			return reject(raw, "a generation step must name its record's Domain and generation")
		}
		prev := r.incKey(rec.Args[0])
		key := r.inc.key(rec.Args[0], rec.Action)
		if key != prev {
			if s, ok := r.genSlot[prev]; ok && r.st.Phase[s] != pl.Done {
				return reject(raw, rec.Action+" begins its generation again, which has not finished")
			}
		}
		s, err := r.allocGen(key)
		if err != nil {
			return rejectErr(raw, err)
		}
		if s < 0 {
			if rec.Reconcile {
				r.rep.Steps = append(r.rep.Steps, "stutter: "+raw+" (the generation finished and its slot was recycled)")
				return nil
			}
			return reject(raw, "the generation finished (Done) earlier in the trace")
		}
		x = s
		label = fmt.Sprintf("%s(%s = %s)", rec.Action, r.cfg.Generations[x], rec.Args[0])
		if a := rec.Facts[modeltrace.FactArtifact]; a != "" && r.slotArt[r.cfg.GenArtifact[x]] != a {
			return reject(label, fmt.Sprintf("the record names artifact %s, the generation's records before it %s", a, r.slotArt[r.cfg.GenArtifact[x]]))
		}
	}
	next, enabled, _ := r.m.Act(rec.Action, &r.st, x)
	if !enabled && rec.Reconcile {
		if f := plReconciled[rec.Action]; f != nil && f(&r.st, x) {
			r.rep.Steps = append(r.rep.Steps, "stutter: "+label+" (already done)")
			return nil
		}
	}
	if !enabled && plInferAt[rec.Action] {
		if path, st, ok := r.infer(rec.Action, x, artifactStep); ok {
			r.rep.Steps = append(r.rep.Steps, path...)
			r.st = st
			next, enabled, _ = r.m.Act(rec.Action, &r.st, x)
		}
	}
	if !enabled {
		return reject(label, "not enabled: no step of Next in the model state below is this action")
	}
	if inv := r.invariant(next); inv != "" {
		return reject(label, "the step violates invariant "+inv)
	}
	r.rep.Steps = append(r.rep.Steps, label)
	r.st = next
	return nil
}

// infer finds the shortest sequence (at most three) of environment steps
// of instance x after which action is enabled.
func (r *plReplayer) infer(action string, x int, artifactStep bool) ([]string, pl.State, bool) {
	env := plEnvironmentGen
	names := r.cfg.Generations
	ids := r.slotGen
	if artifactStep {
		env = []string{"PreparerCrash"}
		names, ids = r.cfg.Artifacts, r.slotArt
	}
	type node struct {
		st   pl.State
		path []string
	}
	frontier := []node{{st: r.st}}
	for depth := 0; depth < 3; depth++ {
		var next []node
		for _, n := range frontier {
			for _, a := range env {
				t, ok, _ := r.m.Act(a, &n.st, x)
				if !ok || r.invariant(t) != "" {
					continue
				}
				p := append(append([]string(nil), n.path...), fmt.Sprintf("inferred: %s(%s = %s)", a, names[x], ids[x]))
				if _, ok, _ := r.m.Act(action, &t, x); ok {
					return p, t, true
				}
				next = append(next, node{t, p})
			}
		}
		frontier = next
	}
	return nil, r.st, false
}
