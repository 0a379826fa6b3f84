package participant

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

var boot = pidfs.BootID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func ident(ino uint64) pidfs.Identity {
	return pidfs.Identity{Authority: pidfs.Authority{BootID: boot, Dev: 15, Ino: ino}, HostPID: uint32(1000 + ino), StartTimeTicks: 77}
}

func staged(ino uint64) Slot    { return Slot{State: Staged, Identity: ident(ino)} }
func committed(ino uint64) Slot { return Slot{State: CommittedSlot, Identity: ident(ino)} }
func legacy() Slot {
	return Slot{State: CommittedSlot, Legacy: &Legacy{HostPID: 42, StartTimeTicks: 9}}
}

func view(p Phase, fields map[string]string, slots map[string]Slot) View {
	if fields == nil {
		fields = map[string]string{}
	}
	if slots == nil {
		slots = map[string]Slot{}
	}
	return View{Phase: p, HasSnapshot: true, Fields: fields, Slots: slots}
}

func bare() View { return View{Phase: Intent} }

func ptr(v View) *View { return &v }

func mustRefuse(t *testing.T, name string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want refusal", name)
		return
	}
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("%s: %v is not ErrRefused", name, err)
	}
}

func mustAccept(t *testing.T, name string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", name, err)
	}
}

func sandboxFull(p Phase) View {
	return view(p, map[string]string{"container_id": "c"}, map[string]Slot{
		"coordinator": committed(1), "supervisor": committed(2), "runsc": committed(3)})
}

func TestTransitions(t *testing.T) {
	sbIntent := view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": staged(2)})
	cases := []struct {
		name   string
		role   Role
		old    *View
		next   View
		accept bool
	}{
		{"create bare intent", Sandbox, nil, bare(), true},
		{"create intent with physical field", PreparedLower, nil, View{Phase: Intent, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl-1"}, Lease: LeaseIntent}, true},
		{"create with process ownership", Sandbox, nil, view(Intent, nil, map[string]Slot{"supervisor": staged(2)}), false},
		{"create active", Sandbox, nil, sandboxFull(Committed), false},
		{"create release intent", Sandbox, nil, view(ReleaseIntent, map[string]string{"container_id": "c"}, nil), false},
		{"create empty snapshot", Sandbox, nil, view(Intent, nil, nil), false},
		{"bare intent -> staged", Sandbox, ptr(bare()), view(Intent, nil, map[string]Slot{"supervisor": staged(2)}), true},
		{"bare intent -> active", Sandbox, ptr(bare()), sandboxFull(Committed), false},
		{"unassigned -> committed on acquired edge", Sandbox, ptr(bare()), view(Intent, nil, map[string]Slot{"supervisor": committed(2)}), false},
		{"unassigned -> committed on direct edge", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": staged(2), "coordinator": committed(1)}), true},
		{"direct edge legacy", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": staged(2), "coordinator": legacy()}), false},
		{"staged -> committed same", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": committed(2)}), true},
		{"staged -> committed other", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": committed(9)}), false},
		{"staged -> committed other pid", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": {State: CommittedSlot, Identity: func() pidfs.Identity { i := ident(2); i.HostPID = 5; return i }()}}), false},
		{"staged replaced", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": staged(9)}), false},
		{"staged cleared", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"runsc": staged(3)}), false},
		{"staged -> legacy", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": legacy()}), false},
		{"field cleared", Sandbox, ptr(sbIntent), view(Intent, nil, map[string]Slot{"supervisor": staged(2)}), false},
		{"field replaced", Sandbox, ptr(sbIntent), view(Intent, map[string]string{"container_id": "d"}, map[string]Slot{"supervisor": staged(2)}), false},
		{"snapshot cleared", Sandbox, ptr(sbIntent), bare(), false},
		{"staged satisfies active", Sandbox, ptr(sbIntent), view(Committed, map[string]string{"container_id": "c"}, map[string]Slot{"coordinator": committed(1), "supervisor": staged(2), "runsc": committed(3)}), false},
		{"legacy satisfies active", Sandbox, ptr(view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": legacy()})), view(Committed, map[string]string{"container_id": "c"}, map[string]Slot{"coordinator": committed(1), "supervisor": legacy(), "runsc": committed(3)}), false},
		{"missing field for active", Sandbox, ptr(view(Intent, nil, map[string]Slot{"supervisor": staged(2), "runsc": staged(3)})), view(Committed, nil, map[string]Slot{"coordinator": committed(1), "supervisor": committed(2), "runsc": committed(3)}), false},
		{"intent -> active complete", Sandbox, ptr(view(Intent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": committed(2), "runsc": staged(3)})), sandboxFull(Committed), true},
		{"wrong active phase", Sandbox, ptr(sbIntent), sandboxFull(Prepared), false},
		{"active -> changed", Sandbox, ptr(sandboxFull(Committed)), view(Committed, map[string]string{"container_id": "x"}, sandboxFull(Committed).Slots), false},
		{"active -> release intent", Sandbox, ptr(sandboxFull(Committed)), sandboxFull(ReleaseIntent), true},
		{"active -> release intent clearing", Sandbox, ptr(sandboxFull(Committed)), view(ReleaseIntent, map[string]string{"container_id": "c"}, nil), false},
		{"active -> intent", Sandbox, ptr(sandboxFull(Committed)), sandboxFull(Intent), false},
		{"release intent -> active", Sandbox, ptr(sandboxFull(ReleaseIntent)), sandboxFull(Committed), false},
		{"release intent -> release intent", Sandbox, ptr(sandboxFull(ReleaseIntent)), sandboxFull(ReleaseIntent), true},
		{"partial -> release intent", Sandbox, ptr(sbIntent), func() View { v := sbIntent; v.Phase = ReleaseIntent; return v }(), true},
		{"partial -> release intent promoting", Sandbox, ptr(sbIntent), view(ReleaseIntent, map[string]string{"container_id": "c"}, map[string]Slot{"supervisor": committed(2)}), false},
		{"bare intent -> release intent", Sandbox, ptr(bare()), View{Phase: ReleaseIntent}, false},
		{"to clean via transition", Sandbox, ptr(sandboxFull(ReleaseIntent)), CleanView(), false},
		{"from clean", Sandbox, ptr(CleanView()), bare(), false},
		{"unknown field", Sandbox, ptr(bare()), view(Intent, map[string]string{"mount": "m"}, nil), false},
		{"unknown slot", Sandbox, ptr(bare()), view(Intent, nil, map[string]Slot{"daemon": staged(1)}), false},
		{"malformed staged identity", Sandbox, ptr(bare()), view(Intent, nil, map[string]Slot{"runsc": {State: Staged}}), false},
		{"legacy staged", Sandbox, ptr(bare()), view(Intent, nil, map[string]Slot{"runsc": {State: Staged, Legacy: &Legacy{HostPID: 1}}}), false},
		{"session intent -> running", SessionTerminal,
			ptr(view(Intent, nil, map[string]Slot{"exec_client": staged(5)})),
			view(Running, map[string]string{"pty": "p", "container_id": "c", "guest": "g"}, map[string]Slot{"exec_client": committed(5), "coordinator": committed(1)}), true},
		{"session bare intent -> running", SessionTerminal, ptr(bare()),
			view(Running, map[string]string{"pty": "p", "container_id": "c", "guest": "g"}, map[string]Slot{"exec_client": committed(5), "coordinator": committed(1)}), false},
		{"session running with staged exec", SessionTerminal,
			ptr(view(Intent, nil, map[string]Slot{"exec_client": staged(5)})),
			view(Running, map[string]string{"pty": "p", "container_id": "c", "guest": "g"}, map[string]Slot{"exec_client": staged(5), "coordinator": committed(1)}), false},
		{"lease held without lease intent", PreparedLower,
			ptr(view(Intent, map[string]string{"prepared_artifact_id": "pl"}, nil)),
			View{Phase: LeaseHeld, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl"}, Lease: LeaseHeldState}, false},
		{"lease held", PreparedLower,
			ptr(View{Phase: Intent, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl"}, Lease: LeaseIntent}),
			View{Phase: LeaseHeld, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl"}, Lease: LeaseHeldState}, true},
		{"lease held keeping intent state", PreparedLower,
			ptr(View{Phase: Intent, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl"}, Lease: LeaseIntent}),
			View{Phase: LeaseHeld, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl"}, Lease: LeaseIntent}, false},
		{"lease held in intent", PreparedLower,
			ptr(View{Phase: Intent, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl"}, Lease: LeaseIntent}),
			View{Phase: Intent, HasSnapshot: true, Fields: map[string]string{"prepared_artifact_id": "pl"}, Lease: LeaseHeldState}, false},
		{"lease on other role", Sandbox, ptr(bare()), View{Phase: Intent, HasSnapshot: true, Lease: LeaseIntent}, false},
	}
	for _, c := range cases {
		err := CheckTransition(c.role, c.old, c.next)
		if c.accept {
			mustAccept(t, c.name, err)
			if err == nil {
				mustAccept(t, c.name+" (invariant)", CheckInvariant(c.role, c.next))
			}
		} else {
			mustRefuse(t, c.name, err)
		}
	}
}

func TestClean(t *testing.T) {
	rel := sandboxFull(ReleaseIntent)
	all := AbsenceProof{Kind: AbsenceExact, Detail: "observed",
		Processes: []pidfs.Authority{ident(1).Authority, ident(2).Authority, ident(3).Authority},
		Fields:    []string{"container_id"}}
	mustAccept(t, "exact proof", CheckClean(Sandbox, &rel, all))
	mustRefuse(t, "no proof", CheckClean(Sandbox, &rel, AbsenceProof{}))
	noDetail := all
	noDetail.Detail = ""
	mustRefuse(t, "proof without detail", CheckClean(Sandbox, &rel, noDetail))
	missing := all
	missing.Processes = missing.Processes[:2]
	mustRefuse(t, "proof missing a process", CheckClean(Sandbox, &rel, missing))
	noField := all
	noField.Fields = nil
	mustRefuse(t, "proof missing a field", CheckClean(Sandbox, &rel, noField))
	runtime := all
	runtime.Kind = AbsenceRuntime
	mustRefuse(t, "runtime proof on release intent", CheckClean(Sandbox, &rel, runtime))
	mustRefuse(t, "clean of active", CheckClean(Sandbox, ptr(sandboxFull(Committed)), all))
	mustRefuse(t, "clean of intent with snapshot", CheckClean(Sandbox, ptr(sandboxFull(Intent)), all))
	mustRefuse(t, "clean of clean", CheckClean(Sandbox, ptr(CleanView()), all))
	mustRefuse(t, "clean of nothing", CheckClean(Sandbox, nil, all))
	mustRefuse(t, "bare intent exact proof", CheckClean(Sandbox, ptr(bare()), all))
	mustAccept(t, "bare intent runtime proof", CheckClean(Sandbox, ptr(bare()), AbsenceProof{Kind: AbsenceRuntime, Detail: "rs and runsc absent"}))

	other := boot
	other[0] ^= 0xff
	mustAccept(t, "boot change", CheckClean(Sandbox, &rel, AbsenceProof{Kind: AbsenceBootChange, CurrentBoot: other, Fields: []string{"container_id"}, Detail: "reboot"}))
	mustRefuse(t, "boot change same boot", CheckClean(Sandbox, &rel, AbsenceProof{Kind: AbsenceBootChange, CurrentBoot: boot, Fields: []string{"container_id"}, Detail: "reboot"}))

	leg := view(ReleaseIntent, nil, map[string]Slot{"runsc": legacy()})
	mustRefuse(t, "legacy unresolved", CheckClean(Sandbox, &leg, AbsenceProof{Kind: AbsenceIndependent, Detail: "x"}))
	mustAccept(t, "legacy resolved", CheckClean(Sandbox, &leg, AbsenceProof{Kind: AbsenceIndependent, LegacyResolved: true, Detail: "operator"}))

	// A Clean that keeps anything is not a valid record.
	kept := CleanView()
	kept.Fields["container_id"] = "c"
	mustRefuse(t, "clean keeping a field", CheckInvariant(Sandbox, kept))
	keptSlot := CleanView()
	keptSlot.Slots["runsc"] = committed(3)
	mustRefuse(t, "clean keeping a slot", CheckInvariant(Sandbox, keptSlot))
	mustAccept(t, "clean view", CheckInvariant(Sandbox, CleanView()))
}

// TestSpecsWellFormed: every role has an active phase distinct from the
// shared phases, and the seven roles plus the session terminal are present.
func TestSpecsWellFormed(t *testing.T) {
	if len(Specs) != len(Roles)+1 {
		t.Fatalf("Specs has %d roles", len(Specs))
	}
	for r, s := range Specs {
		if s.Active == Intent || s.Active == ReleaseIntent || s.Active == Clean || s.Active == "" {
			t.Errorf("%s: active phase %q", r, s.Active)
		}
	}
}

// --- property test over random transition sequences ---

// universe of candidate values for a role.
func randomView(r *rand.Rand, role Role) View {
	spec := Specs[role]
	phases := []Phase{Intent, Intent, ReleaseIntent, spec.Active, spec.Active, Clean}
	v := View{Phase: phases[r.IntN(len(phases))], HasSnapshot: r.IntN(6) != 0, Fields: map[string]string{}, Slots: map[string]Slot{}}
	if !v.HasSnapshot {
		return v
	}
	for f := range spec.Fields {
		if r.IntN(3) != 0 {
			v.Fields[f] = []string{"a", "b"}[r.IntN(2)]
		}
	}
	for n := range spec.Slots {
		switch r.IntN(7) {
		case 0, 1:
		case 2:
			v.Slots[n] = staged(uint64(1 + r.IntN(2)))
		case 3:
			v.Slots[n] = legacy()
		default:
			v.Slots[n] = committed(uint64(1 + r.IntN(2)))
		}
	}
	if role == PreparedLower {
		v.Lease = LeaseState(r.IntN(3))
	}
	return v
}

// mutate derives a plausible next value from cur (so that legal steps are
// common), or draws a fresh random one.
func mutate(r *rand.Rand, role Role, cur *View) View {
	if cur == nil || r.IntN(4) == 0 {
		return randomView(r, role)
	}
	spec := Specs[role]
	n := View{Phase: cur.Phase, HasSnapshot: cur.HasSnapshot, Fields: map[string]string{}, Slots: map[string]Slot{}, Lease: cur.Lease}
	for k, v := range cur.Fields {
		n.Fields[k] = v
	}
	for k, v := range cur.Slots {
		n.Slots[k] = v
	}
	switch r.IntN(7) {
	case 5:
		// A descendant (staged, or committed with or without its parent).
		for name, ss := range spec.Slots {
			if ss.Edge != Descendant || n.Slots[name].State != Unassigned {
				continue
			}
			n.HasSnapshot = true
			id := staged(uint64(1 + r.IntN(2))).Identity
			n.Slots[name] = Slot{State: []SlotState{Staged, CommittedSlot, CommittedSlot}[r.IntN(3)], Identity: id}
		}
	case 0:
		n.Phase = []Phase{Intent, ReleaseIntent, spec.Active}[r.IntN(3)]
	case 1:
		n.HasSnapshot = true
		for f := range spec.Fields {
			if _, ok := n.Fields[f]; !ok && r.IntN(2) == 0 {
				n.Fields[f] = "a"
			}
		}
	case 2:
		n.HasSnapshot = true
		for name := range spec.Slots {
			s := n.Slots[name]
			switch s.State {
			case Unassigned:
				if spec.Slots[name].Edge == Descendant {
					continue // recorded Committed with its parent (case 5)
				}
				n.Slots[name] = staged(uint64(1 + r.IntN(2)))
			case Staged:
				n.Slots[name] = Slot{State: CommittedSlot, Identity: s.Identity}
			}
		}
	case 3:
		if role == PreparedLower {
			n.Lease = LeaseState(r.IntN(3))
		}
	case 4:
		n.Phase = spec.Active
		n.HasSnapshot = true
		for f := range spec.Fields {
			if _, ok := n.Fields[f]; !ok {
				n.Fields[f] = "a"
			}
		}
		for name := range spec.Slots {
			s := n.Slots[name]
			if s.State == Staged {
				n.Slots[name] = Slot{State: CommittedSlot, Identity: s.Identity}
			}
		}
		if role == PreparedLower {
			n.Lease = LeaseHeldState
		}
	}
	return n
}

func randomProof(r *rand.Rand, cur *View) AbsenceProof {
	p := AbsenceProof{Kind: AbsenceKind(r.IntN(5)), Detail: []string{"", "seen"}[r.IntN(2)], LegacyResolved: r.IntN(2) == 0}
	if cur != nil {
		for f := range cur.Fields {
			if r.IntN(5) != 0 {
				p.Fields = append(p.Fields, f)
			}
		}
		for _, s := range cur.Slots {
			if s.IsCurrent() && r.IntN(5) != 0 {
				p.Processes = append(p.Processes, s.Identity.Authority)
			}
		}
	}
	if p.Kind == AbsenceBootChange && r.IntN(2) == 0 {
		p.CurrentBoot = pidfs.BootID{9}
	}
	return p
}

// preserves reports whether next keeps every piece of evidence of old.
func preserves(old, next View) bool {
	if old.HasSnapshot && !next.HasSnapshot {
		return false
	}
	for f, v := range old.Fields {
		if next.Fields[f] != v {
			return false
		}
	}
	for n, s := range old.Slots {
		ns := next.Slots[n]
		switch s.State {
		case Unassigned:
		case Staged:
			if !(ns.State == Staged || ns.State == CommittedSlot) || ns.Legacy != nil || ns.Identity != s.Identity {
				return false
			}
		case CommittedSlot:
			if !s.equal(ns) {
				return false
			}
		}
	}
	return true
}

func runSequence(t *testing.T, r *rand.Rand, role Role, steps int) map[Phase]int {
	t.Helper()
	spec := Specs[role]
	var cur *View
	var history []Phase
	for i := 0; i < steps; i++ {
		if cur != nil && r.IntN(5) == 0 {
			p := randomProof(r, cur)
			if err := CheckClean(role, cur, p); err == nil {
				if !(cur.Phase == ReleaseIntent || (cur.Phase == Intent && !cur.HasSnapshot)) {
					t.Fatalf("%s: Clean accepted from %s", role, cur.Phase)
				}
				if p.Detail == "" || p.Kind == 0 {
					t.Fatalf("%s: Clean accepted with proof %+v", role, p)
				}
				c := CleanView()
				cur = &c
				history = append(history, Clean)
			}
			continue
		}
		next := mutate(r, role, cur)
		if err := CheckTransition(role, cur, next); err != nil {
			if !errors.Is(err, errdefs.ErrRefused) {
				t.Fatalf("%s: refusal %v not ErrRefused", role, err)
			}
			continue
		}
		// Invariants of every accepted step.
		if err := CheckInvariant(role, next); err != nil {
			t.Fatalf("%s: accepted %+v -> %+v violates invariant: %v", role, cur, next, err)
		}
		if next.Phase == Clean {
			t.Fatalf("%s: Clean without proof", role)
		}
		if cur != nil {
			if cur.Phase == Clean {
				t.Fatalf("%s: left Clean", role)
			}
			if !preserves(*cur, next) {
				t.Fatalf("%s: evidence lost %+v -> %+v", role, cur, next)
			}
			if next.Phase == spec.Active && cur.Phase == Intent && (!cur.HasSnapshot || cur.Empty()) {
				t.Fatalf("%s: bare Intent became active", role)
			}
			for n, s := range next.Slots {
				if s.State == CommittedSlot && spec.Slots[n].Edge == Acquired && cur.Slots[n].State == Unassigned {
					t.Fatalf("%s: slot %s skipped Staged", role, n)
				}
			}
		}
		c := next
		cur = &c
		history = append(history, next.Phase)
	}
	reached := map[Phase]int{}
	for _, p := range history {
		reached[p]++
	}
	return reached
}

func TestRandomSequences(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	reached := map[Role]map[Phase]int{}
	// make check (-short) runs a fifth of the sequences; make unit and CI
	// run all of them.
	runs := 3000
	if testing.Short() && os.Getenv("CI") == "" {
		runs = 600
	}
	for i := 0; i < runs; i++ {
		for _, role := range append(append([]Role{}, Roles...), SessionTerminal) {
			if reached[role] == nil {
				reached[role] = map[Phase]int{}
			}
			for p, n := range runSequence(t, r, role, 40) {
				reached[role][p] += n
			}
		}
	}
	// The generator must actually exercise every phase of every role.
	for role, spec := range Specs {
		for _, p := range []Phase{Intent, spec.Active, ReleaseIntent, Clean} {
			if reached[role][p] == 0 {
				t.Errorf("%s never reached %s", role, p)
			}
		}
		t.Logf("%s: %v", role, reached[role])
	}
}

func FuzzTransitions(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint8(0))
	f.Add(uint64(7), uint64(99), uint8(7))
	f.Fuzz(func(t *testing.T, a, b uint64, roleIdx uint8) {
		roles := append(append([]Role{}, Roles...), SessionTerminal)
		role := roles[int(roleIdx)%len(roles)]
		runSequence(t, rand.New(rand.NewPCG(a, b)), role, 60)
	})
}

// TestStateAnchorWithoutDaemon: a kernel-overlay State Anchor has no daemon
// process, so state_anchor reaches Prepared with its artifact and exact
// mounts and no daemon slot; it still refuses Prepared without the mounts
// or the artifact, and a recorded daemon stays authority (Staged is not
// enough). Roles whose slot is a real process keep it required.
func TestStateAnchorWithoutDaemon(t *testing.T) {
	intent := view(Intent, map[string]string{"prepared_artifact_id": "a"}, nil)
	full := view(Prepared, map[string]string{"prepared_artifact_id": "a", "mounts": "m"}, nil)
	mustAccept(t, "Prepared without daemon", CheckTransition(StateAnchor, &intent, full))
	mustRefuse(t, "Prepared without mounts", CheckTransition(StateAnchor, &intent, view(Prepared, map[string]string{"prepared_artifact_id": "a"}, nil)))
	mustRefuse(t, "Prepared without artifact", CheckTransition(StateAnchor, ptr(view(Intent, map[string]string{"mounts": "m"}, nil)), view(Prepared, map[string]string{"mounts": "m"}, nil)))
	withStaged := view(Intent, map[string]string{"prepared_artifact_id": "a"}, map[string]Slot{"daemon": staged(5)})
	mustRefuse(t, "Prepared with a daemon only staged", CheckTransition(StateAnchor, &withStaged, view(Prepared, map[string]string{"prepared_artifact_id": "a", "mounts": "m"}, map[string]Slot{"daemon": staged(5)})))
	mustAccept(t, "Prepared with a committed daemon", CheckTransition(StateAnchor, &withStaged, view(Prepared, map[string]string{"prepared_artifact_id": "a", "mounts": "m"}, map[string]Slot{"daemon": committed(5)})))
	if !Specs[GitRouting].Slots["daemon"].Required {
		t.Fatal("git_routing's daemon (a FUSE router process) must stay required")
	}
	gr := view(Intent, map[string]string{"mount": "m"}, nil)
	mustRefuse(t, "git_routing Prepared without daemon", CheckTransition(GitRouting, &gr, view(Prepared, map[string]string{"mount": "m"}, nil)))
}

// TestDescendantSlots: runsc's sandbox and gofer (descendant edge) are never
// staged, enter Committed only with the runsc client Committed in the same
// snapshot, are immutable afterwards, and Clean must cover them.
func TestDescendantSlots(t *testing.T) {
	staging := view(Intent, nil, map[string]Slot{"coordinator": committed(1), "supervisor": staged(2), "runsc": staged(3)})
	withKids := func(p Phase, sb, gofer Slot) View {
		v := sandboxFull(p)
		v.Slots["runsc_sandbox"], v.Slots["runsc_gofer"] = sb, gofer
		return v
	}
	mustAccept(t, "commit with the runsc client", CheckTransition(Sandbox, ptr(staging), withKids(Committed, committed(4), committed(5))))
	mustAccept(t, "commit without them (earlier builds)", CheckTransition(Sandbox, ptr(staging), sandboxFull(Committed)))
	mustRefuse(t, "staged descendant", CheckTransition(Sandbox, ptr(staging), view(Intent, nil, map[string]Slot{"coordinator": committed(1), "supervisor": staged(2), "runsc": staged(3), "runsc_sandbox": staged(4)})))
	mustRefuse(t, "descendant before its parent is committed", CheckTransition(Sandbox, ptr(staging), view(Intent, nil, map[string]Slot{"coordinator": committed(1), "supervisor": staged(2), "runsc": staged(3), "runsc_gofer": committed(5)})))
	mustRefuse(t, "legacy descendant", CheckTransition(Sandbox, ptr(staging), withKids(Committed, legacy(), committed(5))))
	active := withKids(Committed, committed(4), committed(5))
	mustRefuse(t, "replaced descendant", CheckTransition(Sandbox, ptr(active), withKids(Committed, committed(6), committed(5))))
	mustRefuse(t, "descendant added to an active record", CheckTransition(Sandbox, ptr(sandboxFull(Committed)), withKids(Committed, committed(4), committed(5))))
	released := withKids(ReleaseIntent, committed(4), committed(5))
	mustAccept(t, "release keeps them", CheckTransition(Sandbox, ptr(active), released))
	all := []pidfs.Authority{ident(1).Authority, ident(2).Authority, ident(3).Authority, ident(4).Authority, ident(5).Authority}
	mustRefuse(t, "clean without the gofer", CheckClean(Sandbox, ptr(released), AbsenceProof{Kind: AbsenceExact, Processes: all[:4], Fields: []string{"container_id"}, Detail: "x"}))
	mustAccept(t, "clean covering both", CheckClean(Sandbox, ptr(released), AbsenceProof{Kind: AbsenceExact, Processes: all, Fields: []string{"container_id"}, Detail: "x"}))
}
