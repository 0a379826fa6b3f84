package store

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// ErrNotFound marks a read of a record that does not exist (errors.Is).
var ErrNotFound = errors.New("not found")

// Tx is one transaction of Update (writable) or View (read-only).
type Tx struct {
	s    *Store
	r    pebble.Reader
	w    *pebble.Batch
	done bool
	// created holds the participant and session keys first written in this
	// transaction: their intent is not durable yet, so no process ownership
	// may be recorded on them before the Update commits (broker step 1).
	created map[string]bool
	// phases are the participant phase changes this transaction writes,
	// in order; Update logs them once the batch has committed.
	phases []phaseChange
}

// phaseChange is one participant record written with a phase other than
// the one it had (from is "" for a new record).
type phaseChange struct {
	gen      uint64
	role     participant.Role
	from, to participant.Phase
}

func (tx *Tx) noOwnershipBeforeDurableIntent(key []byte, what string, old, next participant.View) error {
	if !tx.created[string(key)] {
		return nil
	}
	for name, sl := range next.Slots {
		if sl.State != participant.Unassigned && !old.Slots[name].IsCurrent() {
			return errdefs.New(errdefs.ErrRefused, "%s slot %s: process ownership in the transaction that creates the intent (commit the Intent first)", what, name)
		}
	}
	return nil
}

func (tx *Tx) markCreated(key []byte, existed bool) {
	if existed {
		return
	}
	if tx.created == nil {
		tx.created = map[string]bool{}
	}
	tx.created[string(key)] = true
}

func (tx *Tx) writable() error {
	if tx.done {
		return errdefs.New(errdefs.ErrInternal, "domain store: transaction used after it ended")
	}
	if tx.w == nil {
		return errdefs.New(errdefs.ErrInternal, "domain store: write in a read-only View")
	}
	return nil
}

func (tx *Tx) get(key []byte, m proto.Message) (bool, error) {
	if tx.done {
		return false, errdefs.New(errdefs.ErrInternal, "domain store: transaction used after it ended")
	}
	b, ok, err := tx.s.get(tx.r, key)
	if err != nil || !ok {
		return ok, err
	}
	return true, unmarshal(key, b, m)
}

func (tx *Tx) scan(prefix []byte, fn func(k, v []byte) error) error {
	if tx.done {
		return errdefs.New(errdefs.ErrInternal, "domain store: transaction used after it ended")
	}
	return tx.s.scan(tx.r, prefix, fn)
}

func (tx *Tx) set(key []byte, m proto.Message) error {
	b, err := marshalChecked(m)
	if err != nil {
		return err
	}
	if err := tx.w.Set(key, b, nil); err != nil {
		return errdefs.Mark(fmt.Errorf("domain store: write: %w", err), errdefs.ErrInternal)
	}
	return nil
}

func checkRecordVersion(key []byte, v uint32) error {
	if v != recordVersion {
		return errdefs.New(errdefs.ErrRefused, "domain store: record %q has record_version %d, this Lazaret reads %d", key, v, recordVersion)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Generations.

// ComponentID is one minted generation-scoped component ID.
type ComponentID struct {
	Kind string
	ID   string
}

// NewGeneration is what HC records when it starts a generation.
type NewGeneration struct {
	Number                   uint64
	ConfigurationFingerprint []byte
	CoordinatorID            string
	ComponentIDs             []ComponentID
	// Coordinator is HC's own current pidfs identity; its boot ID becomes
	// the generation's boot, which every slot identity must name.
	Coordinator pidfs.Identity
}

// Generation is a stored generation identity.
type Generation struct {
	DomainID                 string
	Number                   uint64
	ConfigurationFingerprint []byte
	CoordinatorID            string
	ComponentIDs             []ComponentID
	BootID                   pidfs.BootID
	Coordinator              participant.Slot // Committed (legacy only after migration)
	Created                  time.Time
}

// CreateGeneration records a new generation. Its number must exceed every
// stored generation; HC's identity must be a valid current pidfs identity.
func (tx *Tx) CreateGeneration(g NewGeneration) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if g.Number == 0 {
		return errdefs.New(errdefs.ErrInvalid, "domain store: generation 0")
	}
	latest, err := tx.LatestGeneration()
	if err != nil {
		return err
	}
	if g.Number <= latest {
		return errdefs.New(errdefs.ErrRefused, "domain store: generation %d is not after the latest generation %d", g.Number, latest)
	}
	if len(g.ConfigurationFingerprint) == 0 {
		return errdefs.New(errdefs.ErrInvalid, "domain store: generation without a configuration fingerprint")
	}
	if err := validID("coordinator ID", g.CoordinatorID); err != nil {
		return err
	}
	if err := participant.ValidIdentity(g.Coordinator); err != nil {
		return errdefs.New(errdefs.ErrInvalid, "domain store: coordinator identity: %v", err)
	}
	rec := &v1.GenerationRecordV1{
		RecordVersion:            recordVersion,
		DomainId:                 string(tx.s.id.ID),
		Generation:               g.Number,
		ConfigurationFingerprint: append([]byte(nil), g.ConfigurationFingerprint...),
		CoordinatorId:            g.CoordinatorID,
		BootId:                   append([]byte(nil), g.Coordinator.BootID[:]...),
		CreatedUnixNano:          tx.s.now().UnixNano(),
		CoordinatorProcess:       CommittedSlot(g.Coordinator),
	}
	seen := map[string]bool{}
	for _, c := range g.ComponentIDs {
		if err := validID("component kind", c.Kind); err != nil {
			return err
		}
		if err := validID("component ID", c.ID); err != nil {
			return err
		}
		if seen[c.Kind] {
			return errdefs.New(errdefs.ErrInvalid, "domain store: component kind %q minted twice", c.Kind)
		}
		seen[c.Kind] = true
		rec.ComponentIds = append(rec.ComponentIds, &v1.MintedComponentIdV1{Kind: c.Kind, Id: c.ID})
	}
	if err := tx.set(generationKey(g.Number), rec); err != nil {
		return err
	}
	tx.s.gen.Store(g.Number)
	return nil
}

func (tx *Tx) generationRecord(n uint64) (*v1.GenerationRecordV1, error) {
	var rec v1.GenerationRecordV1
	key := generationKey(n)
	ok, err := tx.get(key, &rec)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errdefs.Mark(fmt.Errorf("domain store: generation %d: %w", n, ErrNotFound), errdefs.ErrRefused)
	}
	if err := checkRecordVersion(key, rec.GetRecordVersion()); err != nil {
		return nil, err
	}
	if rec.GetDomainId() != string(tx.s.id.ID) || rec.GetGeneration() != n {
		return nil, corrupt("generation record %d names Domain %s generation %d", n, rec.GetDomainId(), rec.GetGeneration())
	}
	return &rec, nil
}

// Generation returns generation n (ErrNotFound if absent).
func (tx *Tx) Generation(n uint64) (*Generation, error) {
	rec, err := tx.generationRecord(n)
	if err != nil {
		return nil, err
	}
	g := &Generation{
		DomainID: rec.GetDomainId(), Number: n, ConfigurationFingerprint: rec.GetConfigurationFingerprint(),
		CoordinatorID: rec.GetCoordinatorId(), Created: time.Unix(0, rec.GetCreatedUnixNano()),
	}
	if len(rec.GetBootId()) != 16 {
		return nil, corrupt("generation %d boot id has %d bytes", n, len(rec.GetBootId()))
	}
	copy(g.BootID[:], rec.GetBootId())
	for _, c := range rec.GetComponentIds() {
		g.ComponentIDs = append(g.ComponentIDs, ComponentID{Kind: c.GetKind(), ID: c.GetId()})
	}
	if g.Coordinator, err = SlotFromProto(rec.GetCoordinatorProcess()); err != nil {
		return nil, err
	}
	if g.Coordinator.State != participant.CommittedSlot {
		return nil, corrupt("generation %d coordinator process is %s", n, g.Coordinator)
	}
	return g, nil
}

// GenerationsAfter lists the stored generation numbers greater than n, in
// order.
func (tx *Tx) GenerationsAfter(n uint64) ([]uint64, error) {
	if tx.done {
		return nil, errdefs.New(errdefs.ErrInternal, "domain store: transaction used after it ended")
	}
	if n == ^uint64(0) {
		return nil, nil
	}
	if tx.s.obs != nil {
		tx.s.obs([]byte(prefixGeneration))
	}
	var out []uint64
	it, err := tx.r.NewIter(&pebble.IterOptions{LowerBound: generationKey(n + 1), UpperBound: prefixEnd([]byte(prefixGeneration))})
	if err != nil {
		return nil, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		g, err := generationOfKey(it.Key())
		if err != nil {
			it.Close()
			return nil, err
		}
		out = append(out, g)
	}
	if err := it.Close(); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("domain store: scan generations after %d: %w", n, err), errdefs.ErrCorrupt)
	}
	return out, nil
}

// SettledThrough returns the recovery watermark: every generation up to it
// was found settled (sandbox record Clean, prepared-lower lease released)
// by a recovery; 0 when none was recorded.
func (tx *Tx) SettledThrough() (uint64, error) {
	var m v1.SettledThroughV1
	ok, err := tx.get(keySettled, &m)
	if err != nil || !ok {
		return 0, err
	}
	if err := checkRecordVersion(keySettled, m.GetRecordVersion()); err != nil {
		return 0, err
	}
	return m.GetGeneration(), nil
}

// SetSettledThrough raises the recovery watermark to g, a stored
// generation; a g at or below the current watermark changes nothing.
func (tx *Tx) SetSettledThrough(g uint64) error {
	if err := tx.writable(); err != nil {
		return err
	}
	cur, err := tx.SettledThrough()
	if err != nil || g <= cur {
		return err
	}
	if _, err := tx.Generation(g); err != nil {
		return fmt.Errorf("domain store: settle through generation %d: %w", g, err)
	}
	return tx.set(keySettled, &v1.SettledThroughV1{RecordVersion: recordVersion, Generation: g})
}

// Generations lists the stored generation numbers in order.
func (tx *Tx) Generations() ([]uint64, error) { return tx.GenerationsAfter(0) }

// LatestGeneration returns the highest stored generation number, 0 if none:
// the last generation key, read without walking the Domain's history.
func (tx *Tx) LatestGeneration() (uint64, error) { return tx.generationAtEnd(true) }

// firstGeneration returns the lowest stored generation number, 0 if none.
func (tx *Tx) firstGeneration() (uint64, error) { return tx.generationAtEnd(false) }

// generationAtEnd reads the last (or first) generation key.
func (tx *Tx) generationAtEnd(last bool) (uint64, error) {
	if tx.done {
		return 0, errdefs.New(errdefs.ErrInternal, "domain store: transaction used after it ended")
	}
	if tx.s.obs != nil {
		tx.s.obs([]byte(prefixGeneration))
	}
	it, err := tx.r.NewIter(&pebble.IterOptions{LowerBound: []byte(prefixGeneration), UpperBound: prefixEnd([]byte(prefixGeneration))})
	if err != nil {
		return 0, err
	}
	var g uint64
	found := it.First()
	if last {
		found = it.Last()
	}
	if found {
		if g, err = generationOfKey(it.Key()); err != nil {
			it.Close()
			return 0, err
		}
	}
	if err := it.Close(); err != nil {
		return 0, errdefs.Mark(fmt.Errorf("domain store: read the generation keys' end: %w", err), errdefs.ErrCorrupt)
	}
	return g, nil
}

// ---------------------------------------------------------------------------
// Participants.

// Participant is a stored participant record.
type Participant struct {
	Generation uint64
	Role       participant.Role
	Phase      participant.Phase
	Snapshot   *v1.RoleSnapshotV1 // nil: bare Intent
	View       participant.View
	Updated    time.Time
}

func (tx *Tx) participantRecord(gen uint64, role participant.Role) (*Participant, error) {
	var rec v1.ParticipantRecordV1
	key := participantKey(gen, role)
	ok, err := tx.get(key, &rec)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, nil
	}
	return decodeParticipant(key, gen, role, &rec)
}

func decodeParticipant(key []byte, gen uint64, role participant.Role, rec *v1.ParticipantRecordV1) (*Participant, error) {
	if err := checkRecordVersion(key, rec.GetRecordVersion()); err != nil {
		return nil, err
	}
	if rec.GetGeneration() != gen || rec.GetRole() != roleProto[role] {
		return nil, corrupt("participant record %q names generation %d role %v", key, rec.GetGeneration(), rec.GetRole())
	}
	phase, ok := phaseFromProto(rec.GetPhase())
	if !ok {
		return nil, corrupt("participant record %q has phase %v", key, rec.GetPhase())
	}
	m, err := roleMessage(role, rec.GetSnapshot())
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("record %q: %w", key, err), errdefs.ErrCorrupt)
	}
	v, err := snapshotView(phase, m)
	if err != nil {
		return nil, err
	}
	return &Participant{Generation: gen, Role: role, Phase: phase, Snapshot: rec.GetSnapshot(), View: v,
		Updated: time.Unix(0, rec.GetUpdatedUnixNano())}, nil
}

func checkRole(role participant.Role) error {
	if _, ok := roleProto[role]; !ok {
		return errdefs.New(errdefs.ErrInvalid, "domain store: unknown participant role %q", role)
	}
	return nil
}

// Participant returns the record of role in generation gen (ErrNotFound).
func (tx *Tx) Participant(gen uint64, role participant.Role) (*Participant, error) {
	if err := checkRole(role); err != nil {
		return nil, err
	}
	p, err := tx.participantRecord(gen, role)
	if err == nil && p == nil {
		err = fmt.Errorf("domain store: participant %s of generation %d: %w", role, gen, ErrNotFound)
	}
	return p, err
}

// Participants returns every participant record of generation gen.
func (tx *Tx) Participants(gen uint64) ([]*Participant, error) {
	var out []*Participant
	prefix := participantPrefix(gen)
	err := tx.scan(prefix, func(k, b []byte) error {
		role := participant.Role(k[len(prefix):])
		if err := checkRole(role); err != nil {
			return corrupt("participant key %q: unknown role", k)
		}
		var rec v1.ParticipantRecordV1
		if err := unmarshal(k, b, &rec); err != nil {
			return err
		}
		p, err := decodeParticipant(k, gen, role, &rec)
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	return out, err
}

func (tx *Tx) writeParticipant(gen uint64, role participant.Role, phase participant.Phase, snap *v1.RoleSnapshotV1) error {
	old, err := tx.participantRecord(gen, role)
	if err != nil {
		return err
	}
	var from participant.Phase
	if old != nil {
		from = old.Phase
	}
	if err := tx.set(participantKey(gen, role), &v1.ParticipantRecordV1{
		RecordVersion: recordVersion, Generation: gen, Role: roleProto[role], Phase: phaseProto[phase],
		Snapshot: snap, UpdatedUnixNano: tx.s.now().UnixNano(),
	}); err != nil {
		return err
	}
	if from != phase {
		tx.phases = append(tx.phases, phaseChange{gen: gen, role: role, from: from, to: phase})
	}
	return nil
}

func viewPtr(p *Participant) *participant.View {
	if p == nil {
		return nil
	}
	return &p.View
}

// PutParticipant records role of generation gen in phase with snapshot
// (nil: bare Intent). It refuses every transition pkg/participant forbids
// (creation other than Intent, evidence cleared or replaced, Unassigned ->
// Committed on an acquired edge, Staged or legacy ownership satisfying the
// active phase, bare Intent -> active, any change into or within
// ReleaseIntent or an active phase, anything after Clean, and Clean itself:
// use ReleaseParticipant and CleanParticipant) and the cross-record rules:
// the generation exists; every newly recorded pidfs identity names the
// generation's boot; a direct-edge owner is the exact committed HC
// (generation record) or RS (sandbox participant's supervisor slot); and the
// role's activation preconditions (see activationRules).
func (tx *Tx) PutParticipant(gen uint64, role participant.Role, phase participant.Phase, snap *v1.RoleSnapshotV1) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := checkRole(role); err != nil {
		return err
	}
	if phase == participant.Clean {
		return errdefs.New(errdefs.ErrRefused, "participant %s: Clean needs an absence proof: use CleanParticipant", role)
	}
	if _, ok := phaseProto[phase]; !ok {
		return errdefs.New(errdefs.ErrInvalid, "participant %s: unknown phase %q", role, phase)
	}
	g, err := tx.Generation(gen)
	if err != nil {
		return err
	}
	old, err := tx.participantRecord(gen, role)
	if err != nil {
		return err
	}
	if snap != nil {
		snap = proto.Clone(snap).(*v1.RoleSnapshotV1)
	}
	m, err := roleMessage(role, snap)
	if err != nil {
		return err
	}
	next, err := snapshotView(phase, m)
	if err != nil {
		return err
	}
	if err := participant.CheckTransition(role, viewPtr(old), next); err != nil {
		return err
	}
	if err := participant.CheckInvariant(role, next); err != nil {
		return err
	}
	var oldView participant.View
	if old != nil {
		oldView = old.View
	}
	if err := tx.checkNewSlots(g, role, oldView, next); err != nil {
		return err
	}
	key := participantKey(gen, role)
	if err := tx.noOwnershipBeforeDurableIntent(key, "participant "+string(role), oldView, next); err != nil {
		return err
	}
	if role == participant.StateAnchor && old == nil {
		// §3.5 acquisition step 4 follows step 3: no anchor (and so no
		// mount) without a held prepared-lower lease.
		pl, err := tx.participantRecord(gen, participant.PreparedLower)
		if err != nil {
			return err
		}
		if pl == nil || pl.Phase != participant.LeaseHeld {
			return errdefs.New(errdefs.ErrRefused, "participant state_anchor: Intent needs prepared_lower LeaseHeld")
		}
	}
	if participant.IsActive(role, phase) && (old == nil || old.Phase != phase) {
		if err := tx.activationRules(g, role, m); err != nil {
			return err
		}
	}
	if role == participant.PreparedLower && phase == participant.ReleaseIntent {
		if err := tx.anchorReleased(gen); err != nil { // as ReleaseParticipant
			return err
		}
	}
	tx.markCreated(key, old != nil)
	return tx.writeParticipant(gen, role, phase, snap)
}

// checkNewSlots applies the store-level identity rules to every slot that
// changes: a new identity names the generation's boot, and a direct-edge
// slot committed directly is the exact existing owner.
func (tx *Tx) checkNewSlots(g *Generation, role participant.Role, old, next participant.View) error {
	spec := participant.Specs[role]
	for name, s := range next.Slots {
		prev := old.Slots[name]
		if prev.State == s.State || s.State == participant.Unassigned {
			continue
		}
		if s.Legacy == nil && s.Identity.BootID != g.BootID {
			return errdefs.New(errdefs.ErrRefused, "participant %s slot %s: identity of boot %s in generation %d of boot %s", role, name, s.Identity.BootID, g.Number, g.BootID)
		}
		if prev.State != participant.Unassigned || s.State != participant.CommittedSlot || spec.Slots[name].Edge != participant.Direct {
			continue
		}
		want, err := tx.directOwner(g, name)
		if err != nil {
			return errdefs.Mark(fmt.Errorf("participant %s slot %s: %w", role, name, err), errdefs.ErrRefused)
		}
		if s.Identity != want {
			return errdefs.New(errdefs.ErrRefused, "participant %s slot %s: %s is not the committed owner %s", role, name, s.Identity, want)
		}
	}
	return nil
}

// directOwner is the exact committed identity a direct edge may name: HC
// ("coordinator") from the generation record, RS ("supervisor") from the
// sandbox participant.
func (tx *Tx) directOwner(g *Generation, slot string) (pidfs.Identity, error) {
	switch slot {
	case "coordinator":
		if g.Coordinator.State != participant.CommittedSlot || g.Coordinator.Legacy != nil {
			return pidfs.Identity{}, fmt.Errorf("the generation's coordinator is %s", g.Coordinator)
		}
		return g.Coordinator.Identity, nil
	case "supervisor":
		sb, err := tx.participantRecord(g.Number, participant.Sandbox)
		if err != nil {
			return pidfs.Identity{}, err
		}
		if sb == nil {
			return pidfs.Identity{}, fmt.Errorf("no sandbox participant records the supervisor")
		}
		s := sb.View.Slots["supervisor"]
		if s.State != participant.CommittedSlot || s.Legacy != nil {
			return pidfs.Identity{}, fmt.Errorf("the sandbox supervisor slot is %s, not Committed(current)", s)
		}
		return s.Identity, nil
	}
	return pidfs.Identity{}, fmt.Errorf("no direct owner for slot %s", slot)
}

// activationRules are the cross-record preconditions of entering a role's
// active phase:
//   - state_anchor Prepared: prepared_lower is LeaseHeld for the same artifact,
//     and the sandbox participant's supervisor slot is Committed(current).
//   - network Committed: the readiness evidence names this generation and
//     matches the snapshot's fingerprint, policy digest, namespace and
//     committed RS; the helper participant is Committed with the same RS.
//   - publication Committed: the configuration fingerprint is the
//     generation's; the sandbox is Committed and every other recorded
//     participant of the generation is in its active phase.
func (tx *Tx) activationRules(g *Generation, role participant.Role, m proto.Message) error {
	refuse := func(format string, args ...any) error {
		return errdefs.New(errdefs.ErrRefused, "participant %s: %s", role, fmt.Sprintf(format, args...))
	}
	switch role {
	case participant.StateAnchor:
		sa := m.(*v1.StateAnchorSnapshotV1)
		pl, err := tx.participantRecord(g.Number, participant.PreparedLower)
		if err != nil {
			return err
		}
		if pl == nil || pl.Phase != participant.LeaseHeld {
			return refuse("Prepared needs prepared_lower LeaseHeld")
		}
		if pl.Snapshot.GetPreparedLower().GetPreparedArtifactId() != sa.GetPreparedArtifactId() {
			return refuse("artifact %q is not the leased artifact %q", sa.GetPreparedArtifactId(), pl.Snapshot.GetPreparedLower().GetPreparedArtifactId())
		}
		// The mounts were created by RS: staged ownership never satisfies
		// dependent-resource creation, so RS's slot is Committed(current).
		if _, err := tx.directOwner(g, "supervisor"); err != nil {
			return refuse("Prepared needs the supervisor that mounted it committed: %v", err)
		}
	case participant.Network:
		n := m.(*v1.NetworkSnapshotV1)
		ev := n.GetReadiness()
		if ev.GetGeneration() != g.Number {
			return refuse("readiness evidence names generation %d, not %d", ev.GetGeneration(), g.Number)
		}
		if !bytes.Equal(ev.GetReadinessFingerprint(), n.GetReadinessFingerprint()) {
			return refuse("readiness evidence fingerprint differs from the participant's")
		}
		if n.PolicyDigest != nil && !bytes.Equal(ev.GetPolicyDigest(), n.GetPolicyDigest()) {
			return refuse("readiness evidence policy digest differs from the participant's")
		}
		if !proto.Equal(ev.GetNetns(), n.GetNetns()) {
			return refuse("readiness evidence namespace differs from the participant's")
		}
		rs, err := IdentityFromProto(ev.GetSupervisor())
		if err != nil {
			return refuse("readiness evidence supervisor: %v", err)
		}
		sup, _ := SlotFromProto(n.GetSupervisor())
		if sup.Identity != rs {
			return refuse("readiness evidence supervisor %s is not the committed RS %s", rs, sup.Identity)
		}
		h, err := tx.participantRecord(g.Number, participant.Helper)
		if err != nil {
			return err
		}
		if h == nil || h.Phase != participant.Committed {
			return refuse("network readiness needs the helper participant Committed first")
		}
		if hs := h.View.Slots["supervisor"]; hs.Identity != rs {
			return refuse("helper supervisor %s is not the network's RS %s", hs.Identity, rs)
		}
	case participant.Publication:
		pb := m.(*v1.PublicationSnapshotV1)
		if !bytes.Equal(pb.GetConfigurationFingerprint(), g.ConfigurationFingerprint) {
			return refuse("configuration fingerprint is not the generation's")
		}
		ps, err := tx.Participants(g.Number)
		if err != nil {
			return err
		}
		sandbox := false
		for _, p := range ps {
			if p.Role == participant.Publication {
				continue
			}
			if !participant.IsActive(p.Role, p.Phase) {
				return refuse("participant %s is %s", p.Role, p.Phase)
			}
			sandbox = sandbox || p.Role == participant.Sandbox
		}
		if !sandbox {
			return refuse("no Committed sandbox")
		}
	}
	return nil
}

// anchorReleased refuses unless state_anchor of gen is absent or Clean: the
// prepared-lower lease is never released under a possibly mounted anchor.
func (tx *Tx) anchorReleased(gen uint64) error {
	sa, err := tx.participantRecord(gen, participant.StateAnchor)
	if err != nil {
		return err
	}
	if sa != nil && sa.Phase != participant.Clean {
		return errdefs.New(errdefs.ErrRefused, "participant prepared_lower: state_anchor of generation %d is %s, not Clean", gen, sa.Phase)
	}
	return nil
}

// ReleaseParticipant moves role of gen to ReleaseIntent keeping every
// recorded value. prepared_lower additionally needs state_anchor absent or
// Clean (release step 3 commits both in one Update).
func (tx *Tx) ReleaseParticipant(gen uint64, role participant.Role) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := checkRole(role); err != nil {
		return err
	}
	if _, err := tx.generationRecord(gen); err != nil {
		return err
	}
	old, err := tx.participantRecord(gen, role)
	if err != nil {
		return err
	}
	if old == nil {
		return errdefs.New(errdefs.ErrRefused, "participant %s of generation %d: nothing to release", role, gen)
	}
	next := old.View
	next.Phase = participant.ReleaseIntent
	if err := participant.CheckTransition(role, &old.View, next); err != nil {
		return err
	}
	if err := participant.CheckInvariant(role, next); err != nil {
		return err
	}
	if role == participant.PreparedLower {
		if err := tx.anchorReleased(gen); err != nil {
			return err
		}
	}
	return tx.writeParticipant(gen, role, participant.ReleaseIntent, old.Snapshot)
}

// CleanParticipant records role of gen Clean after proof: every process slot
// Unassigned, every physical field absent, an explicit empty snapshot kept.
// It refuses unless the record is ReleaseIntent (or a bare Intent with a
// runtime-absence proof) and proof covers every recorded identity.
// prepared_lower additionally needs state_anchor absent or Clean.
func (tx *Tx) CleanParticipant(gen uint64, role participant.Role, proof participant.AbsenceProof) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := checkRole(role); err != nil {
		return err
	}
	if _, err := tx.generationRecord(gen); err != nil {
		return err
	}
	old, err := tx.participantRecord(gen, role)
	if err != nil {
		return err
	}
	if err := participant.CheckClean(role, viewPtr(old), proof); err != nil {
		return err
	}
	if role == participant.PreparedLower {
		if err := tx.anchorReleased(gen); err != nil {
			return err
		}
	}
	empty := EmptyRoleSnapshot(role)
	m, _ := roleMessage(role, empty)
	v, err := snapshotView(participant.Clean, m)
	if err != nil {
		return err
	}
	if err := participant.CheckInvariant(role, v); err != nil {
		return err
	}
	return tx.writeParticipant(gen, role, participant.Clean, empty)
}

// ReleaseHeld records ReleaseIntent for role of gen when it holds a
// resource: recorded with a snapshot and neither ReleaseIntent nor Clean
// yet. A role never recorded, or recorded without a snapshot (bare
// Intent), is left as it is. It reports whether it recorded the intent.
func (tx *Tx) ReleaseHeld(gen uint64, role participant.Role) (bool, error) {
	p, err := tx.Participant(gen, role)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil || p.Phase == participant.ReleaseIntent || p.Phase == participant.Clean || p.Snapshot == nil {
		return false, err
	}
	return true, tx.ReleaseParticipant(gen, role)
}

// ReleaseAndClean ends role of gen the way every owner ends a participant:
// through ReleaseIntent (unless already there) to Clean, with an exact
// absence proof naming absent (the recorded process authorities proven
// gone) and every recorded field; a bare Intent (no snapshot) becomes
// Clean with a runtime-absence proof. A participant never recorded, or
// already Clean, needs nothing.
func (tx *Tx) ReleaseAndClean(gen uint64, role participant.Role, detail string, absent []pidfs.Authority) error {
	p, err := tx.Participant(gen, role)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil || p.Phase == participant.Clean {
		return err
	}
	if p.Snapshot == nil {
		return tx.CleanParticipant(gen, role, participant.AbsenceProof{Kind: participant.AbsenceRuntime, Detail: detail})
	}
	if p.Phase != participant.ReleaseIntent {
		if err := tx.ReleaseParticipant(gen, role); err != nil {
			return err
		}
	}
	fields := make([]string, 0, len(p.View.Fields))
	for f := range p.View.Fields {
		fields = append(fields, f)
	}
	return tx.CleanParticipant(gen, role, participant.AbsenceProof{Kind: participant.AbsenceExact, Processes: absent, Fields: fields, Detail: detail})
}

// CheckLeaseReleaseIntent is the Domain side of catalog release step 4: it
// succeeds only if prepared_lower of gen is ReleaseIntent for artifactID and
// state_anchor of gen is absent or Clean. HC calls it (in a View) from the
// catalog's release callback, under storage-catalog.lock.
func (tx *Tx) CheckLeaseReleaseIntent(gen uint64, artifactID string) error {
	pl, err := tx.participantRecord(gen, participant.PreparedLower)
	if err != nil {
		return err
	}
	if pl == nil || pl.Phase != participant.ReleaseIntent {
		phase := participant.Phase("absent")
		if pl != nil {
			phase = pl.Phase
		}
		return errdefs.New(errdefs.ErrRefused, "prepared_lower of generation %d is %s, not ReleaseIntent", gen, phase)
	}
	if got := pl.Snapshot.GetPreparedLower().GetPreparedArtifactId(); got != artifactID {
		return errdefs.New(errdefs.ErrRefused, "prepared_lower of generation %d names artifact %q, not %q", gen, got, artifactID)
	}
	return tx.anchorReleased(gen)
}

// ---------------------------------------------------------------------------
// Session Terminals.

// SessionTerminal is a stored Session Terminal record.
type SessionTerminal struct {
	Generation uint64
	SessionID  string
	Phase      participant.Phase
	Snapshot   *v1.SessionTerminalSnapshotV1 // nil: bare Intent
	View       participant.View
	Updated    time.Time
}

func decodeSession(key []byte, gen uint64, id string, rec *v1.SessionTerminalRecordV1) (*SessionTerminal, error) {
	if err := checkRecordVersion(key, rec.GetRecordVersion()); err != nil {
		return nil, err
	}
	if rec.GetGeneration() != gen || rec.GetSessionId() != id {
		return nil, corrupt("session record %q names generation %d session %q", key, rec.GetGeneration(), rec.GetSessionId())
	}
	phase, ok := sessionPhaseFromProto(rec.GetPhase())
	if !ok {
		return nil, corrupt("session record %q has phase %v", key, rec.GetPhase())
	}
	var m proto.Message
	if rec.GetSnapshot() != nil {
		m = rec.GetSnapshot()
	}
	v, err := snapshotView(phase, m)
	if err != nil {
		return nil, err
	}
	return &SessionTerminal{Generation: gen, SessionID: id, Phase: phase, Snapshot: rec.GetSnapshot(), View: v,
		Updated: time.Unix(0, rec.GetUpdatedUnixNano())}, nil
}

func (tx *Tx) sessionRecord(gen uint64, id string) (*SessionTerminal, error) {
	var rec v1.SessionTerminalRecordV1
	key := sessionKey(gen, id)
	ok, err := tx.get(key, &rec)
	if err != nil || !ok {
		return nil, err
	}
	return decodeSession(key, gen, id, &rec)
}

// SessionTerminal returns one Session Terminal record (ErrNotFound).
func (tx *Tx) SessionTerminal(gen uint64, id string) (*SessionTerminal, error) {
	if err := validID("session ID", id); err != nil {
		return nil, err
	}
	st, err := tx.sessionRecord(gen, id)
	if err == nil && st == nil {
		err = fmt.Errorf("domain store: session %s of generation %d: %w", id, gen, ErrNotFound)
	}
	return st, err
}

// SessionTerminals lists the Session Terminal records of gen.
func (tx *Tx) SessionTerminals(gen uint64) ([]*SessionTerminal, error) {
	var out []*SessionTerminal
	prefix := sessionPrefix(gen)
	err := tx.scan(prefix, func(k, b []byte) error {
		var rec v1.SessionTerminalRecordV1
		if err := unmarshal(k, b, &rec); err != nil {
			return err
		}
		st, err := decodeSession(k, gen, string(k[len(prefix):]), &rec)
		if err != nil {
			return err
		}
		out = append(out, st)
		return nil
	})
	return out, err
}

func (tx *Tx) writeSession(gen uint64, id string, phase participant.Phase, snap *v1.SessionTerminalSnapshotV1) error {
	return tx.set(sessionKey(gen, id), &v1.SessionTerminalRecordV1{
		RecordVersion: recordVersion, Generation: gen, SessionId: id, Phase: sessionPhaseProto[phase],
		Snapshot: snap, UpdatedUnixNano: tx.s.now().UnixNano(),
	})
}

// PutSessionTerminal records a Session Terminal (spec §3.3 acquisition):
// Intent (step 1), Intent with the staged exec client (step 2), Running with
// committed HC and exec client, PTY, container and guest group (step 4). The
// same rules as PutParticipant apply; Running additionally needs the
// generation's sandbox Committed with the same container ID.
func (tx *Tx) PutSessionTerminal(gen uint64, id string, phase participant.Phase, snap *v1.SessionTerminalSnapshotV1) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := validID("session ID", id); err != nil {
		return err
	}
	if phase == participant.Clean {
		return errdefs.New(errdefs.ErrRefused, "session %s: Clean needs an absence proof: use CleanSessionTerminal", id)
	}
	if _, ok := sessionPhaseProto[phase]; !ok {
		return errdefs.New(errdefs.ErrInvalid, "session %s: unknown phase %q", id, phase)
	}
	g, err := tx.Generation(gen)
	if err != nil {
		return err
	}
	old, err := tx.sessionRecord(gen, id)
	if err != nil {
		return err
	}
	var m proto.Message
	if snap != nil {
		snap = proto.Clone(snap).(*v1.SessionTerminalSnapshotV1)
		m = snap
	}
	next, err := snapshotView(phase, m)
	if err != nil {
		return err
	}
	var oldView *participant.View
	var prev participant.View
	if old != nil {
		oldView, prev = &old.View, old.View
	}
	if err := participant.CheckTransition(participant.SessionTerminal, oldView, next); err != nil {
		return err
	}
	if err := participant.CheckInvariant(participant.SessionTerminal, next); err != nil {
		return err
	}
	if err := tx.checkNewSlots(g, participant.SessionTerminal, prev, next); err != nil {
		return err
	}
	key := sessionKey(gen, id)
	if err := tx.noOwnershipBeforeDurableIntent(key, "session "+id, prev, next); err != nil {
		return err
	}
	if phase == participant.Running && (old == nil || old.Phase != participant.Running) {
		sb, err := tx.participantRecord(gen, participant.Sandbox)
		if err != nil {
			return err
		}
		if sb == nil || sb.Phase != participant.Committed {
			return errdefs.New(errdefs.ErrRefused, "session %s: Running needs the generation's sandbox Committed", id)
		}
		if c := sb.Snapshot.GetSandbox().GetContainerId(); c != snap.GetContainerId() {
			return errdefs.New(errdefs.ErrRefused, "session %s: container %q is not the generation's container %q", id, snap.GetContainerId(), c)
		}
	}
	tx.markCreated(key, old != nil)
	return tx.writeSession(gen, id, phase, snap)
}

// ReleaseSessionTerminal records ReleaseIntent keeping every identity
// (§3.3 release step 1).
func (tx *Tx) ReleaseSessionTerminal(gen uint64, id string) error {
	if err := tx.writable(); err != nil {
		return err
	}
	old, err := tx.SessionTerminal(gen, id)
	if err != nil {
		return err
	}
	next := old.View
	next.Phase = participant.ReleaseIntent
	if err := participant.CheckTransition(participant.SessionTerminal, &old.View, next); err != nil {
		return err
	}
	return tx.writeSession(gen, id, participant.ReleaseIntent, old.Snapshot)
}

// CleanSessionTerminal records Clean after proof that the guest group, exec
// client and PTY are absent (§3.3 release step 3), or, for a bare Intent,
// after the runtime-absence check.
func (tx *Tx) CleanSessionTerminal(gen uint64, id string, proof participant.AbsenceProof) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if err := validID("session ID", id); err != nil {
		return err
	}
	old, err := tx.sessionRecord(gen, id)
	if err != nil {
		return err
	}
	var oldView *participant.View
	if old != nil {
		oldView = &old.View
	}
	if err := participant.CheckClean(participant.SessionTerminal, oldView, proof); err != nil {
		return err
	}
	return tx.writeSession(gen, id, participant.Clean, &v1.SessionTerminalSnapshotV1{})
}

// ---------------------------------------------------------------------------
// Generation mailbox.

// Mailbox returns the generation's mailbox record (ErrNotFound).
func (tx *Tx) Mailbox(gen uint64) (*v1.GenerationMailboxRecordV1, error) {
	var rec v1.GenerationMailboxRecordV1
	key := mailboxKey(gen)
	ok, err := tx.get(key, &rec)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("domain store: mailbox of generation %d: %w", gen, ErrNotFound)
	}
	if err := checkRecordVersion(key, rec.GetRecordVersion()); err != nil {
		return nil, err
	}
	if rec.GetGeneration() != gen {
		return nil, corrupt("mailbox record %d names generation %d", gen, rec.GetGeneration())
	}
	return &rec, nil
}

// PutMailbox records the generation's mailbox. The mailbox ID and directory
// identity move only absent -> present and the request sequence never goes
// back; the store sets record_version, generation and the created time.
func (tx *Tx) PutMailbox(gen uint64, rec *v1.GenerationMailboxRecordV1) error {
	if err := tx.writable(); err != nil {
		return err
	}
	if _, err := tx.generationRecord(gen); err != nil {
		return err
	}
	if err := validID("mailbox ID", rec.GetMailboxId()); err != nil {
		return err
	}
	next := proto.Clone(rec).(*v1.GenerationMailboxRecordV1)
	next.RecordVersion, next.Generation = recordVersion, gen
	old, err := tx.Mailbox(gen)
	switch {
	case errors.Is(err, ErrNotFound):
		next.CreatedUnixNano = tx.s.now().UnixNano()
	case err != nil:
		return err
	default:
		if old.GetMailboxId() != next.GetMailboxId() {
			return errdefs.New(errdefs.ErrRefused, "mailbox of generation %d: ID replaced", gen)
		}
		if old.Directory != nil && !proto.Equal(old.GetDirectory(), next.GetDirectory()) {
			return errdefs.New(errdefs.ErrRefused, "mailbox of generation %d: directory identity cleared or replaced", gen)
		}
		if next.GetNextRequestSequence() < old.GetNextRequestSequence() {
			return errdefs.New(errdefs.ErrRefused, "mailbox of generation %d: request sequence went back", gen)
		}
		next.CreatedUnixNano = old.GetCreatedUnixNano()
	}
	return tx.set(mailboxKey(gen), next)
}

// ---------------------------------------------------------------------------
// Slot helpers for the broker's Stage callback and readiness promotion.

// withSlot returns a copy of msg (a role or session snapshot message) whose
// process slot field name holds slot.
func withSlot(msg proto.Message, name string, slot *v1.ProcessSlotV1) (proto.Message, error) {
	out := proto.Clone(msg)
	r := out.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil || !isSlotField(fd) {
		return nil, errdefs.New(errdefs.ErrInvalid, "domain store: %s has no process slot %q", r.Descriptor().Name(), name)
	}
	r.Set(fd, protoreflect.ValueOfMessage(slot.ProtoReflect()))
	return out, nil
}

func (tx *Tx) setParticipantSlot(gen uint64, role participant.Role, name string, slot *v1.ProcessSlotV1) error {
	if err := checkRole(role); err != nil {
		return err
	}
	p, err := tx.Participant(gen, role)
	if err != nil {
		return err
	}
	snap := p.Snapshot
	if snap == nil {
		snap = EmptyRoleSnapshot(role)
	}
	m, err := roleMessage(role, snap)
	if err != nil {
		return err
	}
	m, err = withSlot(m, name, slot)
	if err != nil {
		return err
	}
	w := EmptyRoleSnapshot(role)
	wr := w.ProtoReflect()
	wr.Set(wr.Descriptor().Oneofs().ByName("role").Fields().ByName(protoreflect.Name(role)), protoreflect.ValueOfMessage(m.ProtoReflect()))
	return tx.PutParticipant(gen, role, p.Phase, w)
}

// StageProcess records Staged(id) in process slot name of role's record,
// keeping its phase (Intent) and every other value: acquisition step 6, for
// use in proc.Spec.Stage. All PutParticipant rules apply.
func (tx *Tx) StageProcess(gen uint64, role participant.Role, name string, id pidfs.Identity) error {
	return tx.setParticipantSlot(gen, role, name, StagedSlot(id))
}

// CommitProcess records Committed(id) in process slot name, keeping the
// phase: step 9 (after target readiness) for a Staged(id) slot, or the
// direct existing-process edge for an Unassigned direct slot.
func (tx *Tx) CommitProcess(gen uint64, role participant.Role, name string, id pidfs.Identity) error {
	return tx.setParticipantSlot(gen, role, name, CommittedSlot(id))
}

func (tx *Tx) setSessionSlot(gen uint64, id, name string, slot *v1.ProcessSlotV1) error {
	st, err := tx.SessionTerminal(gen, id)
	if err != nil {
		return err
	}
	snap := st.Snapshot
	if snap == nil {
		snap = &v1.SessionTerminalSnapshotV1{}
	}
	m, err := withSlot(snap, name, slot)
	if err != nil {
		return err
	}
	return tx.PutSessionTerminal(gen, id, st.Phase, m.(*v1.SessionTerminalSnapshotV1))
}

// StageSessionProcess records Staged(pid) in a Session Terminal slot
// ("exec_client"), keeping the phase (§3.3 acquisition step 2).
func (tx *Tx) StageSessionProcess(gen uint64, sessionID, name string, pid pidfs.Identity) error {
	return tx.setSessionSlot(gen, sessionID, name, StagedSlot(pid))
}

// CommitSessionProcess records Committed(pid) in a Session Terminal slot,
// keeping the phase. (Step 4 usually promotes both slots and sets Running in
// one PutSessionTerminal instead.)
func (tx *Tx) CommitSessionProcess(gen uint64, sessionID, name string, pid pidfs.Identity) error {
	return tx.setSessionSlot(gen, sessionID, name, CommittedSlot(pid))
}
