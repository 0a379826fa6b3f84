package store

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	v1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
)

// migration rewrites a store of schema version from into version to. apply
// stages and validates every rewritten row in b; migrate then writes the
// version key last and commits b as one synced batch.
type migration struct {
	from, to uint32
	name     string
	apply    func(s *Store, b *pebble.Batch) error
}

// migrations is the ordered migration list; every entry must have a case in
// migrationTests (store_test.go), which TestEveryMigrationTested checks.
var migrations = []migration{
	{from: 1, to: 2, name: "v1-pid-start-to-legacy-unverified", apply: migrateV1PidStart},
}

func (s *Store) migrate(from uint32) error {
	ver := from
	for _, m := range migrations {
		if m.from != ver {
			continue
		}
		b := s.db.NewIndexedBatch()
		if err := m.apply(s, b); err != nil {
			b.Close()
			return fmt.Errorf("domain store: migration %s (v%d -> v%d): %w", m.name, m.from, m.to, err)
		}
		if err := b.Set(keyVersion, marshal(&v1.SchemaVersionV1{Version: m.to}), nil); err != nil { // last
			b.Close()
			return err
		}
		err := s.commit(b)
		b.Close()
		if err != nil {
			return err
		}
		s.log.Info("domain store migrated", "domain_id", string(s.id.ID), "migration", m.name, "from", m.from, "to", m.to)
		ver = m.to
	}
	if ver != SchemaVersion {
		return corrupt("no migration path from schema version %d to %d", from, SchemaVersion)
	}
	return nil
}

// migrateV1PidStart turns every schema-v1 PID/start-only process value into
// Committed(LegacyUnverifiedProcessIdentityV1), preserving both numbers. It
// never observes the host and never produces pidfs authority.
func migrateV1PidStart(s *Store, b *pebble.Batch) error {
	tables := []struct {
		prefix string
		new    func() proto.Message
	}{
		{prefixGeneration, func() proto.Message { return &v1.GenerationRecordV1{} }},
		{prefixParticipant, func() proto.Message { return &v1.ParticipantRecordV1{} }},
		{prefixSession, func() proto.Message { return &v1.SessionTerminalRecordV1{} }},
	}
	for _, t := range tables {
		err := s.scan(b, []byte(t.prefix), func(k, val []byte) error {
			m := t.new()
			if err := unmarshal(k, val, m); err != nil {
				return err
			}
			if !rewriteV1Slots(m.ProtoReflect()) {
				return validateV2(k, m)
			}
			if err := validateV2(k, m); err != nil {
				return err
			}
			nb, err := marshalChecked(m)
			if err != nil {
				return err
			}
			return b.Set(k, nb, nil)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// rewriteV1Slots rewrites every ProcessSlotV1 below m in place and reports
// whether anything changed.
func rewriteV1Slots(m protoreflect.Message) bool {
	changed := false
	if m.Descriptor().FullName() == slotDescriptor.FullName() {
		slot := m.Interface().(*v1.ProcessSlotV1)
		if old, ok := slot.State.(*v1.ProcessSlotV1_SchemaV1PidStart); ok {
			slot.State = &v1.ProcessSlotV1_Committed{Committed: &v1.HostProcessIdentityV1{
				Kind: &v1.HostProcessIdentityV1_LegacyUnverified{LegacyUnverified: &v1.LegacyUnverifiedProcessIdentityV1{
					HostPid: old.SchemaV1PidStart.GetPid(), StartTimeTicks: old.SchemaV1PidStart.GetStartTimeTicks()}}}}
			return true
		}
		return false
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				changed = rewriteV1Slots(l.Get(i).Message()) || changed
			}
		case fd.IsMap():
		default:
			changed = rewriteV1Slots(v.Message()) || changed
		}
		return true
	})
	return changed
}

// validateV2 checks a migrated row as the v2 readers will read it.
func validateV2(k []byte, m proto.Message) error {
	var bad error
	var walk func(r protoreflect.Message)
	walk = func(r protoreflect.Message) {
		if r.Descriptor().FullName() == slotDescriptor.FullName() {
			if _, err := SlotFromProto(r.Interface().(*v1.ProcessSlotV1)); err != nil && bad == nil {
				bad = err
			}
			return
		}
		r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Kind() == protoreflect.MessageKind && !fd.IsMap() {
				if fd.IsList() {
					for i := 0; i < v.List().Len(); i++ {
						walk(v.List().Get(i).Message())
					}
				} else {
					walk(v.Message())
				}
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	if bad != nil {
		return errdefs.Mark(fmt.Errorf("migrated record %q: %w", k, bad), errdefs.ErrCorrupt)
	}
	switch rec := m.(type) {
	case *v1.ParticipantRecordV1:
		role := participant.Role(k[len(participantPrefix(rec.GetGeneration())):])
		p, err := decodeParticipant(k, rec.GetGeneration(), role, rec)
		if err != nil {
			return err
		}
		if p.Phase == participant.Clean && !p.View.Empty() {
			return corrupt("migrated record %q: Clean with recorded values", k)
		}
	case *v1.SessionTerminalRecordV1:
		if _, err := decodeSession(k, rec.GetGeneration(), rec.GetSessionId(), rec); err != nil {
			return err
		}
	}
	return nil
}
