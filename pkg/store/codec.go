package store

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// recordVersion is the record_version every record of this schema carries.
const recordVersion = 1

// Keys.
var (
	keyVersion = []byte("v")
	keyDomain  = []byte("d")
	// keySettled is the recovery watermark (SettledThroughV1).
	keySettled = []byte("s")
)

const (
	prefixGeneration  = "g/"
	prefixParticipant = "p/"
	prefixSession     = "t/"
	prefixMailbox     = "x/"
)

func genBytes(gen uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], gen)
	return b[:]
}

func generationKey(gen uint64) []byte { return append([]byte(prefixGeneration), genBytes(gen)...) }

// generationOfKey is the generation number a generation key names.
func generationOfKey(k []byte) (uint64, error) {
	if len(k) != len(prefixGeneration)+8 || string(k[:len(prefixGeneration)]) != prefixGeneration {
		return 0, corrupt("malformed generation key %q", k)
	}
	return binary.BigEndian.Uint64(k[len(prefixGeneration):]), nil
}

func mailboxKey(gen uint64) []byte { return append([]byte(prefixMailbox), genBytes(gen)...) }

func participantPrefix(gen uint64) []byte {
	return append(append([]byte(prefixParticipant), genBytes(gen)...), '/')
}
func participantKey(gen uint64, role participant.Role) []byte {
	return append(participantPrefix(gen), role...)
}
func sessionPrefix(gen uint64) []byte {
	return append(append([]byte(prefixSession), genBytes(gen)...), '/')
}
func sessionKey(gen uint64, id string) []byte { return append(sessionPrefix(gen), id...) }

// prefixEnd is the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func corrupt(format string, args ...any) error {
	return errdefs.New(errdefs.ErrCorrupt, "domain store: "+format, args...)
}

// --- roles and phases ---

var roleProto = map[participant.Role]v1.ParticipantRole{
	participant.PreparedLower: v1.ParticipantRole_PARTICIPANT_ROLE_PREPARED_LOWER,
	participant.StateAnchor:   v1.ParticipantRole_PARTICIPANT_ROLE_STATE_ANCHOR,
	participant.GitRouting:    v1.ParticipantRole_PARTICIPANT_ROLE_GIT_ROUTING,
	participant.Network:       v1.ParticipantRole_PARTICIPANT_ROLE_NETWORK,
	participant.Helper:        v1.ParticipantRole_PARTICIPANT_ROLE_HELPER,
	participant.Sandbox:       v1.ParticipantRole_PARTICIPANT_ROLE_SANDBOX,
	participant.Publication:   v1.ParticipantRole_PARTICIPANT_ROLE_PUBLICATION,
}

var phaseProto = map[participant.Phase]v1.ParticipantPhase{
	participant.Intent:        v1.ParticipantPhase_PARTICIPANT_PHASE_INTENT,
	participant.LeaseHeld:     v1.ParticipantPhase_PARTICIPANT_PHASE_LEASE_HELD,
	participant.Prepared:      v1.ParticipantPhase_PARTICIPANT_PHASE_PREPARED,
	participant.Committed:     v1.ParticipantPhase_PARTICIPANT_PHASE_COMMITTED,
	participant.ReleaseIntent: v1.ParticipantPhase_PARTICIPANT_PHASE_RELEASE_INTENT,
	participant.Clean:         v1.ParticipantPhase_PARTICIPANT_PHASE_CLEAN,
}

var sessionPhaseProto = map[participant.Phase]v1.SessionTerminalPhase{
	participant.Intent:        v1.SessionTerminalPhase_SESSION_TERMINAL_PHASE_INTENT,
	participant.Running:       v1.SessionTerminalPhase_SESSION_TERMINAL_PHASE_RUNNING,
	participant.ReleaseIntent: v1.SessionTerminalPhase_SESSION_TERMINAL_PHASE_RELEASE_INTENT,
	participant.Clean:         v1.SessionTerminalPhase_SESSION_TERMINAL_PHASE_CLEAN,
}

func phaseFromProto(p v1.ParticipantPhase) (participant.Phase, bool) {
	for k, v := range phaseProto {
		if v == p {
			return k, true
		}
	}
	return "", false
}

func sessionPhaseFromProto(p v1.SessionTerminalPhase) (participant.Phase, bool) {
	for k, v := range sessionPhaseProto {
		if v == p {
			return k, true
		}
	}
	return "", false
}

// --- process identities and slots ---

// IdentityProto encodes a pidfs identity.
func IdentityProto(id pidfs.Identity) *v1.PidfsProcessIdentityV1 {
	return &v1.PidfsProcessIdentityV1{
		BootId:         append([]byte(nil), id.BootID[:]...),
		PidfsStDev:     id.Dev,
		PidfsStIno:     id.Ino,
		HostPid:        id.HostPID,
		StartTimeTicks: id.StartTimeTicks,
	}
}

// IdentityFromProto decodes a pidfs identity; a boot ID that is not 16 bytes
// is corrupt.
func IdentityFromProto(p *v1.PidfsProcessIdentityV1) (pidfs.Identity, error) {
	var id pidfs.Identity
	if p == nil {
		return id, corrupt("missing pidfs identity")
	}
	if len(p.GetBootId()) != 16 {
		return id, corrupt("pidfs identity boot id has %d bytes, want 16", len(p.GetBootId()))
	}
	copy(id.BootID[:], p.GetBootId())
	id.Dev, id.Ino = p.GetPidfsStDev(), p.GetPidfsStIno()
	id.HostPID, id.StartTimeTicks = p.GetHostPid(), p.GetStartTimeTicks()
	return id, nil
}

// StagedSlot is Staged(id): a child acquired and durably staged (step 6).
func StagedSlot(id pidfs.Identity) *v1.ProcessSlotV1 {
	return &v1.ProcessSlotV1{State: &v1.ProcessSlotV1_Staged{Staged: IdentityProto(id)}}
}

// CommittedSlot is Committed(current pidfs id).
func CommittedSlot(id pidfs.Identity) *v1.ProcessSlotV1 {
	return &v1.ProcessSlotV1{State: &v1.ProcessSlotV1_Committed{Committed: &v1.HostProcessIdentityV1{
		Kind: &v1.HostProcessIdentityV1_Pidfs{Pidfs: IdentityProto(id)}}}}
}

// SlotFromProto decodes a process slot of the current schema. A nil slot or
// an unset state is Unassigned; a schema-v1 PID/start value is corrupt here
// (only the migration reads it).
func SlotFromProto(p *v1.ProcessSlotV1) (participant.Slot, error) {
	if p == nil {
		return participant.Slot{}, nil
	}
	switch s := p.State.(type) {
	case nil, *v1.ProcessSlotV1_Unassigned:
		return participant.Slot{}, nil
	case *v1.ProcessSlotV1_Staged:
		id, err := IdentityFromProto(s.Staged)
		if err != nil {
			return participant.Slot{}, err
		}
		return participant.Slot{State: participant.Staged, Identity: id}, nil
	case *v1.ProcessSlotV1_Committed:
		switch k := s.Committed.GetKind().(type) {
		case *v1.HostProcessIdentityV1_Pidfs:
			id, err := IdentityFromProto(k.Pidfs)
			if err != nil {
				return participant.Slot{}, err
			}
			return participant.Slot{State: participant.CommittedSlot, Identity: id}, nil
		case *v1.HostProcessIdentityV1_LegacyUnverified:
			return participant.Slot{State: participant.CommittedSlot, Legacy: &participant.Legacy{
				HostPID: k.LegacyUnverified.GetHostPid(), StartTimeTicks: k.LegacyUnverified.GetStartTimeTicks()}}, nil
		default:
			return participant.Slot{}, corrupt("committed process slot without an identity")
		}
	case *v1.ProcessSlotV1_SchemaV1PidStart:
		return participant.Slot{}, corrupt("schema v1 PID/start process value in a v%d store", SchemaVersion)
	default:
		return participant.Slot{}, corrupt("unknown process slot state %T", s)
	}
}

var slotDescriptor = (&v1.ProcessSlotV1{}).ProtoReflect().Descriptor()

func isSlotField(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind && !fd.IsList() && !fd.IsMap() &&
		fd.Message().FullName() == slotDescriptor.FullName()
}

// canonical encodes one present field value for equality comparison.
func canonical(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v.Message().Interface())
		return "m:" + string(b), err
	case protoreflect.BytesKind:
		return "b:" + string(v.Bytes()), nil
	case protoreflect.StringKind:
		return "s:" + v.String(), nil
	case protoreflect.EnumKind:
		return "e:" + strconv.Itoa(int(v.Enum())), nil
	case protoreflect.Int64Kind, protoreflect.Int32Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return "i:" + strconv.FormatInt(v.Int(), 10), nil
	case protoreflect.Uint64Kind, protoreflect.Uint32Kind, protoreflect.Fixed64Kind:
		return "u:" + strconv.FormatUint(v.Uint(), 10), nil
	case protoreflect.BoolKind:
		return "t:" + strconv.FormatBool(v.Bool()), nil
	}
	return "", fmt.Errorf("field %s: unsupported kind %s", fd.Name(), fd.Kind())
}

// snapshotView builds the participant.View of a role snapshot message (nil:
// no snapshot). Every ProcessSlotV1 field is a slot; every other present
// field is a physical field, except prepared_lower's lease_state.
func snapshotView(phase participant.Phase, m proto.Message) (participant.View, error) {
	v := participant.View{Phase: phase, Fields: map[string]string{}, Slots: map[string]participant.Slot{}}
	if m == nil {
		return v, nil
	}
	r := m.ProtoReflect()
	if !r.IsValid() {
		return v, nil
	}
	v.HasSnapshot = true
	if len(r.GetUnknown()) != 0 {
		return v, corrupt("%s has unknown fields", r.Descriptor().Name())
	}
	fields := r.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		name := string(fd.Name())
		if isSlotField(fd) {
			if !r.Has(fd) {
				continue
			}
			s, err := SlotFromProto(r.Get(fd).Message().Interface().(*v1.ProcessSlotV1))
			if err != nil {
				return v, err
			}
			if s.State != participant.Unassigned {
				v.Slots[name] = s
			}
			continue
		}
		if !r.Has(fd) {
			continue
		}
		if name == "lease_state" && fd.Kind() == protoreflect.EnumKind {
			switch v1.LeaseState(r.Get(fd).Enum()) {
			case v1.LeaseState_LEASE_STATE_INTENT:
				v.Lease = participant.LeaseIntent
			case v1.LeaseState_LEASE_STATE_HELD:
				v.Lease = participant.LeaseHeldState
			default:
				return v, errdefs.New(errdefs.ErrInvalid, "lease_state %v", r.Get(fd).Enum())
			}
			continue
		}
		c, err := canonical(fd, r.Get(fd))
		if err != nil {
			return v, err
		}
		v.Fields[name] = c
	}
	return v, nil
}

// roleMessage returns the role's snapshot message inside s, refusing a
// snapshot of another role.
func roleMessage(role participant.Role, s *v1.RoleSnapshotV1) (proto.Message, error) {
	if s == nil {
		return nil, nil
	}
	var m proto.Message
	var got participant.Role
	switch r := s.Role.(type) {
	case *v1.RoleSnapshotV1_PreparedLower:
		m, got = r.PreparedLower, participant.PreparedLower
	case *v1.RoleSnapshotV1_StateAnchor:
		m, got = r.StateAnchor, participant.StateAnchor
	case *v1.RoleSnapshotV1_GitRouting:
		m, got = r.GitRouting, participant.GitRouting
	case *v1.RoleSnapshotV1_Network:
		m, got = r.Network, participant.Network
	case *v1.RoleSnapshotV1_Helper:
		m, got = r.Helper, participant.Helper
	case *v1.RoleSnapshotV1_Sandbox:
		m, got = r.Sandbox, participant.Sandbox
	case *v1.RoleSnapshotV1_Publication:
		m, got = r.Publication, participant.Publication
	case nil:
		return nil, errdefs.New(errdefs.ErrInvalid, "role snapshot without a role")
	default:
		return nil, errdefs.New(errdefs.ErrInvalid, "unknown role snapshot %T", r)
	}
	if got != role {
		return nil, errdefs.New(errdefs.ErrRefused, "participant %s: snapshot of role %s", role, got)
	}
	if !m.ProtoReflect().IsValid() {
		return nil, errdefs.New(errdefs.ErrInvalid, "participant %s: nil role snapshot", role)
	}
	return m, nil
}

// EmptyRoleSnapshot returns the explicit empty snapshot of role (Clean).
func EmptyRoleSnapshot(role participant.Role) *v1.RoleSnapshotV1 {
	switch role {
	case participant.PreparedLower:
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_PreparedLower{PreparedLower: &v1.PreparedLowerSnapshotV1{}}}
	case participant.StateAnchor:
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_StateAnchor{StateAnchor: &v1.StateAnchorSnapshotV1{}}}
	case participant.GitRouting:
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_GitRouting{GitRouting: &v1.GitRoutingSnapshotV1{}}}
	case participant.Network:
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Network{Network: &v1.NetworkSnapshotV1{}}}
	case participant.Helper:
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Helper{Helper: &v1.HelperSnapshotV1{}}}
	case participant.Sandbox:
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Sandbox{Sandbox: &v1.SandboxSnapshotV1{}}}
	case participant.Publication:
		return &v1.RoleSnapshotV1{Role: &v1.RoleSnapshotV1_Publication{Publication: &v1.PublicationSnapshotV1{}}}
	}
	return nil
}

// validID refuses an identifier that could not be a key component.
func validID(kind, s string) error {
	if s == "" || len(s) > 128 {
		return errdefs.New(errdefs.ErrInvalid, "%s %q: must be 1..128 bytes", kind, s)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e || r == '/' }) {
		return errdefs.New(errdefs.ErrInvalid, "%s %q: printable ASCII without '/' only", kind, s)
	}
	return nil
}

func unmarshal(key []byte, b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return corrupt("record %q: %v", key, err)
	}
	return nil
}

// marshal encodes a record built only from validated values.
func marshal(m proto.Message) []byte {
	b, err := marshalChecked(m)
	if err != nil {
		panic(err) // unreachable: only invalid UTF-8 fails, and callers validate strings
	}
	return b
}

func marshalChecked(m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, errdefs.New(errdefs.ErrInvalid, "domain store: encode %T: %v", m, err)
	}
	return b, nil
}
