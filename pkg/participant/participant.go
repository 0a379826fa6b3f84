// Package participant is the pure state machine of the spec's durable
// participants (§3.2 "Host process identity and causal acquisition
// refinement", §3.3, §3.5): role-bound Participants with phases Intent,
// LeaseHeld, Prepared, Committed, ReleaseIntent and Clean; Session Terminals
// with Intent, Running, ReleaseIntent and Clean; and the three-phase process
// slot Unassigned | Staged(pidfs identity) | Committed(pidfs | legacy).
//
// It makes no syscalls and knows nothing about encoding: pkg/store converts
// each stored record into a View and calls CheckTransition (or CheckClean)
// with the old and the proposed View before it writes anything, so an illegal
// transition is refused by the store API itself, whatever the caller does.
//
// Rules (each names the function that enforces it):
//
//   - R1 creation: the first record is Intent, bare or with physical fields
//     only; no process ownership before the intent is durable (CheckTransition).
//   - R2 Clean is terminal; nothing leaves Clean (CheckTransition, CheckClean).
//   - R3 only CheckClean produces Clean, with an AbsenceProof covering every
//     recorded process authority and physical field; Clean clears every slot
//     to Unassigned and every field to absent, keeping an explicit empty
//     snapshot (CheckClean; CheckTransition refuses a Clean target).
//   - R4 a present snapshot never becomes absent; a present snapshot in Intent
//     is non-empty (checkSnapshotStep).
//   - R5 recorded evidence is never cleared or replaced: a field moves only
//     absent -> present, a slot only Unassigned -> Staged(x) -> Committed(x)
//     (same full identity), or Unassigned -> Committed(current) on a direct
//     existing-process edge or a descendant edge (a process an acquired
//     child created, recorded with its committed parent: checkDescendants);
//     legacy values never enter (checkSlotStep).
//   - R6 a bare Intent never becomes active; an active phase needs a
//     non-empty Intent before it and a complete snapshot: every required field
//     present and every required slot Committed with a current pidfs identity
//     (Staged, Unassigned and legacy never satisfy it); an optional slot
//     (state_anchor's daemon: kernel overlays have none) may stay Unassigned,
//     but once recorded it must be Committed(current) too (checkComplete).
//   - R7 each role has exactly one active phase (prepared_lower=LeaseHeld,
//     state_anchor|git_routing=Prepared, network|helper|sandbox|publication=
//     Committed, session terminal=Running); an active record is immutable.
//   - R8 ReleaseIntent is entered from a non-bare Intent or the active phase
//     with the snapshot unchanged, and stays unchanged until Clean; a bare
//     Intent goes to Clean only with a runtime-absence proof.
//   - R9 prepared_lower: lease_state=Intent is recorded in Intent before
//     LeaseHeld; LeaseHeld sets lease_state=Held; lease_state changes nowhere
//     else.
//   - R10 slot promotion Staged -> Committed happens only in a transition to
//     Intent or to the active phase, never into ReleaseIntent.
package participant

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// Role is a participant role, or the Session Terminal pseudo-role.
type Role string

const (
	PreparedLower   Role = "prepared_lower"
	StateAnchor     Role = "state_anchor"
	GitRouting      Role = "git_routing"
	Network         Role = "network"
	Helper          Role = "helper"
	Sandbox         Role = "sandbox"
	Publication     Role = "publication"
	SessionTerminal Role = "session_terminal"
)

// Roles lists the seven generation participant roles in startup order.
var Roles = []Role{PreparedLower, StateAnchor, GitRouting, Network, Helper, Sandbox, Publication}

// Phase is a participant (or Session Terminal) phase.
type Phase string

const (
	Intent        Phase = "Intent"
	LeaseHeld     Phase = "LeaseHeld"
	Prepared      Phase = "Prepared"
	Committed     Phase = "Committed"
	Running       Phase = "Running"
	ReleaseIntent Phase = "ReleaseIntent"
	Clean         Phase = "Clean"
)

// Edge says how a process enters a slot.
type Edge int

const (
	// Acquired: a child acquired through CausalChildAcquisitionV1; it must be
	// Staged before it is Committed.
	Acquired Edge = iota
	// Direct: an already committed current owner or supervising process
	// (Network RS, Helper RS, Sandbox HC, Session Terminal HC) may enter
	// Committed directly; the store checks it is that exact process.
	Direct
	// Descendant: a process an acquired child created itself (runsc's
	// sandbox and gofer, children of the attached runsc client). No barrier
	// of Lazaret's precedes it, so there is nothing to stage: it enters
	// Committed(current) directly, and only together with or after its
	// Parent slot's Committed(current) identity (the store checks it), since
	// it was identified as the child of exactly that process.
	Descendant
)

// SlotSpec describes one process slot of a role.
type SlotSpec struct {
	Edge     Edge
	Required bool   // must be Committed(current pidfs) in the active phase
	Parent   string // Descendant only: the slot of the process that created it
}

// RoleSpec is the static shape of a role.
type RoleSpec struct {
	Active Phase
	// Fields are the optional physical fields; true marks those required in
	// the active phase.
	Fields map[string]bool
	Slots  map[string]SlotSpec
}

// Specs is the shape of every role. Field and slot names are the proto field
// names of the role's snapshot message (pkg/store checks they agree).
var Specs = map[Role]RoleSpec{
	PreparedLower: {Active: LeaseHeld,
		Fields: map[string]bool{"prepared_artifact_id": true, "source_identity": false},
		Slots:  map[string]SlotSpec{}},
	// A State Anchor is one kernel overlay per persistent path (spec §3.5:
	// "one kernel overlay (with userxattr) per configured persistent sandbox
	// path"), mounted by the Runtime Supervisor in its mount namespace: the
	// kernel serves it, no daemon process exists, so the daemon slot is
	// optional (a FUSE-backed anchor would record its daemon there). The
	// exact mounts are the required "mounts" field (mount namespace plus each
	// overlay's unique mount ID); the single "mount" is not used by it.
	StateAnchor: {Active: Prepared,
		Fields: map[string]bool{"prepared_artifact_id": true, "mount": false, "upper_dir": false, "mounts": true, "mount_namespace": false},
		Slots:  map[string]SlotSpec{"daemon": {Edge: Acquired}}},
	GitRouting: {Active: Prepared,
		Fields: map[string]bool{"mount": true},
		Slots:  map[string]SlotSpec{"daemon": {Edge: Acquired, Required: true}}},
	Network: {Active: Committed,
		Fields: map[string]bool{"netns": true, "readiness_fingerprint": true, "policy_digest": false, "readiness": true},
		Slots:  map[string]SlotSpec{"supervisor": {Edge: Direct, Required: true}}},
	Helper: {Active: Committed,
		Fields: map[string]bool{"netns": false},
		Slots:  map[string]SlotSpec{"helper": {Edge: Acquired, Required: true}, "supervisor": {Edge: Direct, Required: true}}},
	// The runsc sandbox and gofer are optional: records of earlier builds
	// lack them, and HC refuses a SandboxReady without them itself. Once
	// recorded they are authority like any other slot.
	Sandbox: {Active: Committed,
		Fields: map[string]bool{"container_id": true, "bundle_dir": false},
		Slots: map[string]SlotSpec{"coordinator": {Edge: Direct, Required: true}, "supervisor": {Edge: Acquired, Required: true},
			"runsc": {Edge: Acquired, Required: true}, "runsc_sandbox": {Edge: Descendant, Parent: "runsc"}, "runsc_gofer": {Edge: Descendant, Parent: "runsc"}}},
	Publication: {Active: Committed,
		Fields: map[string]bool{"control_socket": true, "configuration_fingerprint": true, "published_unix_nano": false},
		Slots:  map[string]SlotSpec{}},
	SessionTerminal: {Active: Running,
		Fields: map[string]bool{"pty": true, "container_id": true, "guest": true},
		Slots:  map[string]SlotSpec{"coordinator": {Edge: Direct, Required: true}, "exec_client": {Edge: Acquired, Required: true}}},
}

// SlotState is the kind of a process slot.
type SlotState int

const (
	Unassigned SlotState = iota
	Staged
	CommittedSlot
)

func (s SlotState) String() string {
	switch s {
	case Unassigned:
		return "Unassigned"
	case Staged:
		return "Staged"
	case CommittedSlot:
		return "Committed"
	}
	return fmt.Sprintf("SlotState(%d)", int(s))
}

// Legacy is a LegacyUnverifiedProcessIdentityV1: never authority.
type Legacy struct {
	HostPID        uint32
	StartTimeTicks uint64
}

// Slot is one process slot. Identity is meaningful for Staged and for a
// current Committed slot; Legacy is set only for a legacy Committed slot.
type Slot struct {
	State    SlotState
	Identity pidfs.Identity
	Legacy   *Legacy
}

// IsCurrent reports whether the slot holds a current pidfs identity
// (Staged, or Committed and not legacy).
func (s Slot) IsCurrent() bool {
	return (s.State == Staged || s.State == CommittedSlot) && s.Legacy == nil
}

func (s Slot) String() string {
	switch {
	case s.State == Unassigned:
		return "Unassigned"
	case s.Legacy != nil:
		return fmt.Sprintf("%s(legacy-unverified pid %d start %d)", s.State, s.Legacy.HostPID, s.Legacy.StartTimeTicks)
	default:
		return fmt.Sprintf("%s(%s)", s.State, s.Identity)
	}
}

func (s Slot) equal(o Slot) bool {
	if s.State != o.State {
		return false
	}
	if s.State == Unassigned {
		return true
	}
	if (s.Legacy == nil) != (o.Legacy == nil) {
		return false
	}
	if s.Legacy != nil {
		return *s.Legacy == *o.Legacy
	}
	return s.Identity == o.Identity
}

// LeaseState is prepared_lower's record of the catalog lease.
type LeaseState int

const (
	LeaseNone LeaseState = iota
	LeaseIntent
	LeaseHeldState
)

// View is the store-independent view of one participant or Session Terminal
// record. Fields hold a canonical encoding of each present physical field
// (used only for equality); absent fields are not in the map. Slots not in
// the map are Unassigned.
type View struct {
	Phase       Phase
	HasSnapshot bool
	Fields      map[string]string
	Slots       map[string]Slot
	Lease       LeaseState // prepared_lower only
}

func (v View) slot(name string) Slot { return v.Slots[name] }

// Empty reports whether the snapshot records nothing.
func (v View) Empty() bool {
	if len(v.Fields) != 0 || v.Lease != LeaseNone {
		return false
	}
	for _, s := range v.Slots {
		if s.State != Unassigned {
			return false
		}
	}
	return true
}

// IsActive reports whether phase is role's active phase.
func IsActive(role Role, phase Phase) bool {
	spec, ok := Specs[role]
	return ok && spec.Active == phase
}

func refuse(role Role, format string, args ...any) error {
	return errdefs.New(errdefs.ErrRefused, "participant %s: %s", role, fmt.Sprintf(format, args...))
}

func validPhase(spec RoleSpec, p Phase) bool {
	return p == Intent || p == ReleaseIntent || p == Clean || p == spec.Active
}

// checkShape refuses unknown fields and slots, malformed identities and a
// lease state on any role but prepared_lower.
func checkShape(role Role, spec RoleSpec, v View) error {
	if !validPhase(spec, v.Phase) {
		return refuse(role, "phase %s is not a phase of this role", v.Phase)
	}
	if !v.HasSnapshot && (len(v.Fields) != 0 || len(v.Slots) != 0 || v.Lease != LeaseNone) {
		return refuse(role, "values without a snapshot")
	}
	for f := range v.Fields {
		if _, ok := spec.Fields[f]; !ok {
			return refuse(role, "unknown field %q", f)
		}
	}
	for n, s := range v.Slots {
		if _, ok := spec.Slots[n]; !ok {
			return refuse(role, "unknown process slot %q", n)
		}
		if err := checkSlotShape(s); err != nil {
			return refuse(role, "slot %s: %v", n, err)
		}
	}
	if v.Lease != LeaseNone && role != PreparedLower {
		return refuse(role, "lease state on a role without a lease")
	}
	return nil
}

func checkSlotShape(s Slot) error {
	switch s.State {
	case Unassigned:
		if s.Legacy != nil || s.Identity != (pidfs.Identity{}) {
			return fmt.Errorf("unassigned slot carries an identity")
		}
	case Staged:
		if s.Legacy != nil {
			return fmt.Errorf("only a current pidfs identity may be staged")
		}
		return ValidIdentity(s.Identity)
	case CommittedSlot:
		if s.Legacy != nil {
			if s.Identity != (pidfs.Identity{}) {
				return fmt.Errorf("legacy slot carries a pidfs identity")
			}
			return nil
		}
		return ValidIdentity(s.Identity)
	default:
		return fmt.Errorf("unknown slot state %d", int(s.State))
	}
	return nil
}

// ValidIdentity refuses an identity that cannot be current pidfs authority:
// a zero boot ID, a zero pidfs inode or a zero locator.
func ValidIdentity(id pidfs.Identity) error {
	if id.BootID == (pidfs.BootID{}) {
		return fmt.Errorf("pidfs identity without a boot id")
	}
	if id.Ino == 0 {
		return fmt.Errorf("pidfs identity without a pidfs inode")
	}
	if id.HostPID == 0 {
		return fmt.Errorf("pidfs identity without a host pid locator")
	}
	return nil
}

// CheckTransition refuses every illegal change from old (nil: no record yet)
// to next. A Clean target is refused here: only CheckClean produces Clean.
func CheckTransition(role Role, old *View, next View) error {
	spec, ok := Specs[role]
	if !ok {
		return refuse(role, "unknown role")
	}
	if err := checkShape(role, spec, next); err != nil {
		return err
	}
	if next.Phase == Clean {
		return refuse(role, "Clean needs an absence proof (CheckClean)")
	}
	if old == nil { // R1
		if next.Phase != Intent {
			return refuse(role, "first record must be Intent, not %s", next.Phase)
		}
		for n, s := range next.Slots {
			if s.State != Unassigned {
				return refuse(role, "slot %s: process ownership before the intent is durable", n)
			}
		}
		if role == PreparedLower && next.Lease != LeaseNone && next.Lease != LeaseIntent {
			return refuse(role, "lease state %d in Intent", next.Lease)
		}
		if next.HasSnapshot && next.Empty() {
			return refuse(role, "an Intent snapshot must record something (a bare Intent has none)")
		}
		return nil
	}
	if err := checkShape(role, spec, *old); err != nil {
		return fmt.Errorf("stored record: %w", err)
	}
	switch old.Phase {
	case Clean: // R2
		return refuse(role, "Clean is terminal")
	case ReleaseIntent: // R8
		if next.Phase != ReleaseIntent {
			return refuse(role, "ReleaseIntent -> %s", next.Phase)
		}
		return sameSnapshot(role, *old, next)
	case spec.Active: // R7
		switch next.Phase {
		case spec.Active, ReleaseIntent:
			return sameSnapshot(role, *old, next)
		}
		return refuse(role, "%s -> %s", old.Phase, next.Phase)
	case Intent:
		switch next.Phase {
		case Intent:
			if err := checkSnapshotStep(role, spec, *old, next, true); err != nil {
				return err
			}
			if role == PreparedLower && next.Lease != old.Lease && !(old.Lease == LeaseNone && next.Lease == LeaseIntent) {
				return refuse(role, "lease state may only be recorded as Intent within Intent")
			}
			return nil
		case ReleaseIntent:
			if !old.HasSnapshot {
				return refuse(role, "a bare Intent has nothing to release: Clean it with a runtime-absence proof")
			}
			return sameSnapshot(role, *old, next)
		case spec.Active: // R6
			if !old.HasSnapshot || old.Empty() {
				return refuse(role, "bare Intent -> %s: commit a non-empty acquisition snapshot first", next.Phase)
			}
			if err := checkSnapshotStep(role, spec, *old, next, true); err != nil {
				return err
			}
			if role == PreparedLower { // R9
				if old.Lease != LeaseIntent {
					return refuse(role, "LeaseHeld without lease_state=Intent recorded before the catalog insertion")
				}
				if next.Lease != LeaseHeldState {
					return refuse(role, "LeaseHeld must record lease_state=Held")
				}
				if old.Fields["prepared_artifact_id"] == "" {
					return refuse(role, "LeaseHeld for an artifact not named in the Intent")
				}
			}
			return checkComplete(role, spec, next)
		}
		return refuse(role, "Intent -> %s", next.Phase)
	}
	return refuse(role, "unknown stored phase %s", old.Phase)
}

func sameSnapshot(role Role, old, next View) error {
	if old.HasSnapshot != next.HasSnapshot || old.Lease != next.Lease {
		return refuse(role, "%s -> %s must keep the snapshot unchanged", old.Phase, next.Phase)
	}
	for f, v := range old.Fields {
		nv, ok := next.Fields[f]
		if !ok {
			return refuse(role, "field %s cleared", f)
		}
		if nv != v {
			return refuse(role, "field %s replaced", f)
		}
	}
	for f := range next.Fields {
		if _, ok := old.Fields[f]; !ok {
			return refuse(role, "%s -> %s must keep the snapshot unchanged (field %s added)", old.Phase, next.Phase, f)
		}
	}
	for _, n := range slotNames(old, next) {
		if !old.slot(n).equal(next.slot(n)) {
			return refuse(role, "slot %s: %s -> %s in %s -> %s", n, old.slot(n), next.slot(n), old.Phase, next.Phase)
		}
	}
	return nil
}

func slotNames(a, b View) []string {
	var names []string
	for n := range a.Slots {
		names = append(names, n)
	}
	for n := range b.Slots {
		if _, ok := a.Slots[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// checkSnapshotStep enforces R4, R5 and R10 for a growth step.
func checkSnapshotStep(role Role, spec RoleSpec, old, next View, mayPromote bool) error {
	if old.HasSnapshot && !next.HasSnapshot {
		return refuse(role, "snapshot cleared")
	}
	if next.HasSnapshot && next.Empty() {
		return refuse(role, "an Intent snapshot must record something")
	}
	for f, v := range old.Fields {
		nv, ok := next.Fields[f]
		if !ok {
			return refuse(role, "field %s cleared", f)
		}
		if nv != v {
			return refuse(role, "field %s replaced", f)
		}
	}
	for _, n := range slotNames(old, next) {
		if err := checkSlotStep(spec.Slots[n], old.slot(n), next.slot(n), mayPromote); err != nil {
			return refuse(role, "slot %s: %v", n, err)
		}
	}
	return checkDescendants(role, spec, next)
}

// checkDescendants refuses a recorded descendant-edge slot whose parent
// slot is not Committed(current) in the same snapshot.
func checkDescendants(role Role, spec RoleSpec, v View) error {
	for n, s := range v.Slots {
		ss := spec.Slots[n]
		if ss.Edge != Descendant || s.State == Unassigned {
			continue
		}
		if p := v.slot(ss.Parent); p.State != CommittedSlot || p.Legacy != nil {
			return refuse(role, "slot %s: a descendant is recorded only with its parent slot %s Committed(current), not %s", n, ss.Parent, p)
		}
	}
	return nil
}

// CheckSlotStep applies R5 to one slot: the legal moves are
// Unassigned -> Unassigned | Staged(current, not a descendant) |
// Committed(current, direct or descendant edge),
// Staged(x) -> Staged(x) | Committed(x), Committed(x) -> Committed(x).
func checkSlotStep(spec SlotSpec, old, next Slot, mayPromote bool) error {
	if old.equal(next) {
		return nil
	}
	switch old.State {
	case Unassigned:
		switch next.State {
		case Staged:
			if spec.Edge == Descendant {
				return fmt.Errorf("a descendant has no barrier to be staged at: it is recorded Committed with its parent")
			}
			return nil
		case CommittedSlot:
			if next.Legacy != nil {
				return fmt.Errorf("a legacy-unverified identity cannot be entered (migration only)")
			}
			if spec.Edge != Direct && spec.Edge != Descendant {
				return fmt.Errorf("Unassigned -> Committed skips Staged on an acquired child edge")
			}
			return nil
		}
	case Staged:
		switch next.State {
		case Unassigned:
			return fmt.Errorf("staged identity cleared")
		case Staged:
			return fmt.Errorf("staged identity replaced (%s -> %s)", old.Identity, next.Identity)
		case CommittedSlot:
			if next.Legacy != nil || next.Identity != old.Identity {
				return fmt.Errorf("committed identity %s is not the exact staged identity %s", next, old)
			}
			if !mayPromote {
				return fmt.Errorf("promotion outside acquisition")
			}
			return nil
		}
	case CommittedSlot:
		if next.State == Unassigned {
			return fmt.Errorf("committed identity cleared")
		}
		return fmt.Errorf("committed identity replaced (%s -> %s)", old, next)
	}
	return fmt.Errorf("%s -> %s", old, next)
}

// checkComplete enforces R6: every required field present, every required
// slot Committed with a current pidfs identity.
func checkComplete(role Role, spec RoleSpec, v View) error {
	var missing []string
	for f, req := range spec.Fields {
		if _, ok := v.Fields[f]; req && !ok {
			missing = append(missing, "field "+f)
		}
	}
	for n, s := range spec.Slots {
		sl := v.slot(n)
		if !s.Required && sl.State == Unassigned {
			continue // an optional slot may stay empty, but a recorded one is authority
		}
		if sl.State != CommittedSlot || sl.Legacy != nil {
			missing = append(missing, fmt.Sprintf("slot %s is %s, not Committed(current pidfs)", n, sl))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return refuse(role, "%s needs: %s", v.Phase, strings.Join(missing, "; "))
	}
	return nil
}

// AbsenceKind says how absence was established.
type AbsenceKind int

const (
	_ AbsenceKind = iota
	// AbsenceExact: the exact retained handles (or PidfsRecoveryMatch) observed
	// each recorded process gone and each recorded physical resource absent.
	AbsenceExact
	// AbsenceIndependent: recovery observed absence independently of process
	// liveness (mount table, namespace files, runsc state, ...).
	AbsenceIndependent
	// AbsenceRuntime: the sealed runtime-absence check (RS and attached runsc
	// absent) that lets a bare Intent, which recorded nothing, become Clean.
	AbsenceRuntime
	// AbsenceBootChange: the boot ID changed since every recorded pidfs
	// authority was formed, which fences them all.
	AbsenceBootChange
)

// AbsenceProof is the argument CheckClean requires. It must cover every
// recorded identity: each current pidfs authority by listing it in Processes
// (or by a BootChange proof naming a different boot), each legacy slot by
// LegacyResolved (reboot, independent absence or operator resolution), and
// each present physical field by listing its name in Fields.
type AbsenceProof struct {
	Kind           AbsenceKind
	CurrentBoot    pidfs.BootID // AbsenceBootChange: the boot observed now
	Processes      []pidfs.Authority
	Fields         []string
	LegacyResolved bool
	Detail         string // what was observed, for the operator
}

// CleanView is the only Clean value: an explicit empty snapshot.
func CleanView() View {
	return View{Phase: Clean, HasSnapshot: true, Fields: map[string]string{}, Slots: map[string]Slot{}}
}

// CheckClean refuses Clean of old unless proof covers it (R2, R3, R8).
func CheckClean(role Role, old *View, proof AbsenceProof) error {
	spec, ok := Specs[role]
	if !ok {
		return refuse(role, "unknown role")
	}
	if old == nil {
		return refuse(role, "Clean of a record that does not exist")
	}
	if err := checkShape(role, spec, *old); err != nil {
		return fmt.Errorf("stored record: %w", err)
	}
	if proof.Detail == "" {
		return refuse(role, "absence proof without a description of the observation")
	}
	switch old.Phase {
	case Clean:
		return refuse(role, "Clean is terminal")
	case Intent:
		if old.HasSnapshot {
			return refuse(role, "Intent with a snapshot must record ReleaseIntent before Clean")
		}
		if proof.Kind != AbsenceRuntime {
			return refuse(role, "a bare Intent becomes Clean only after the runtime-absence check")
		}
		return nil
	case ReleaseIntent:
	default:
		return refuse(role, "%s -> Clean: record ReleaseIntent first", old.Phase)
	}
	switch proof.Kind {
	case AbsenceExact, AbsenceIndependent, AbsenceBootChange:
	default:
		return refuse(role, "absence proof kind %d cannot clean a release intent", proof.Kind)
	}
	for f := range old.Fields {
		if !slices.Contains(proof.Fields, f) {
			return refuse(role, "absence proof does not cover field %s", f)
		}
	}
	for _, n := range slotNames(*old, *old) {
		s := old.slot(n)
		switch {
		case s.State == Unassigned:
		case s.Legacy != nil:
			if !proof.LegacyResolved {
				return refuse(role, "slot %s holds a legacy-unverified identity: needs reboot, independent absence or operator resolution", n)
			}
		case proof.Kind == AbsenceBootChange:
			if proof.CurrentBoot == (pidfs.BootID{}) || proof.CurrentBoot == s.Identity.BootID {
				return refuse(role, "slot %s: boot %s is not fenced by the proof", n, s.Identity.BootID)
			}
		default:
			if !slices.Contains(proof.Processes, s.Identity.Authority) {
				return refuse(role, "absence proof does not cover slot %s %s", n, s)
			}
		}
	}
	return nil
}

// CheckInvariant checks one stored View on its own: its shape, a complete
// snapshot in the active phase, an empty explicit snapshot in Clean, and no
// legacy or staged slot in an active record.
func CheckInvariant(role Role, v View) error {
	spec, ok := Specs[role]
	if !ok {
		return refuse(role, "unknown role")
	}
	if err := checkShape(role, spec, v); err != nil {
		return err
	}
	switch v.Phase {
	case Clean:
		if !v.HasSnapshot || !v.Empty() {
			return refuse(role, "Clean with recorded values")
		}
	case spec.Active:
		if !v.HasSnapshot {
			return refuse(role, "active without a snapshot")
		}
		if role == PreparedLower && v.Lease != LeaseHeldState {
			return refuse(role, "LeaseHeld without lease_state=Held")
		}
		return checkComplete(role, spec, v)
	case ReleaseIntent:
		if !v.HasSnapshot || v.Empty() {
			return refuse(role, "ReleaseIntent without recorded values (a bare Intent goes to Clean)")
		}
	case Intent:
		if v.HasSnapshot && v.Empty() {
			return refuse(role, "Intent with an empty snapshot")
		}
		if v.Lease == LeaseHeldState {
			return refuse(role, "lease_state=Held in Intent")
		}
	}
	return nil
}
