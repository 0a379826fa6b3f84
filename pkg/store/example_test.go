package store

import (
	"context"
	"errors"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// acquire is how HC wires the broker (pkg/proc) to the store for one
// acquired child: intent before the spawn, Staged in Spec.Stage, Committed
// after readiness. spawn stands for proc.Broker.Acquire.
func acquire(s *Store, gen uint64, role participant.Role, slot string,
	spawn func(stage func(ctx context.Context, id pidfs.Identity) error) (pidfs.Identity, error)) error {
	// Step 1: the owning participant's intent, durable before the spawn.
	if err := s.Update(func(tx *Tx) error {
		if _, err := tx.Participant(gen, role); errors.Is(err, ErrNotFound) {
			return tx.PutParticipant(gen, role, participant.Intent, nil)
		} else {
			return err
		}
	}); err != nil {
		return err
	}
	// Steps 2-8 in the broker; step 6 is this callback.
	id, err := spawn(func(_ context.Context, id pidfs.Identity) error {
		return s.Update(func(tx *Tx) error { return tx.StageProcess(gen, role, slot, id) })
	})
	if err != nil {
		return err
	}
	// Step 9, after target readiness.
	return s.Update(func(tx *Tx) error { return tx.CommitProcess(gen, role, slot, id) })
}

func TestSlotHelpersAndBrokerWiring(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open(t)
	defer s.Close()
	ok(t, "gen", s.Update(func(tx *Tx) error { return tx.CreateGeneration(newGen(1)) }))
	spawn := func(id pidfs.Identity) func(func(context.Context, pidfs.Identity) error) (pidfs.Identity, error) {
		return func(stage func(context.Context, pidfs.Identity) error) (pidfs.Identity, error) {
			return id, stage(context.Background(), id)
		}
	}
	ok(t, "acquire rs", acquire(s, 1, participant.Sandbox, "supervisor", spawn(rsProc)))
	ok(t, "hc direct", s.Update(func(tx *Tx) error { return tx.CommitProcess(1, participant.Sandbox, "coordinator", hcProc) }))
	ok(t, "acquire runsc", acquire(s, 1, participant.Sandbox, "runsc", spawn(runscProc)))
	ok(t, "view", s.View(func(tx *Tx) error {
		p, err := tx.Participant(1, participant.Sandbox)
		if err != nil {
			return err
		}
		for name, id := range map[string]pidfs.Identity{"supervisor": rsProc, "coordinator": hcProc, "runsc": runscProc} {
			if sl := p.View.Slots[name]; sl.State != participant.CommittedSlot || sl.Identity != id {
				t.Errorf("%s: %s", name, sl)
			}
		}
		return nil
	}))
	mustRefuse(t, "restage", s.Update(func(tx *Tx) error { return tx.StageProcess(1, participant.Sandbox, "runsc", proc(70)) }))
	ok(t, "helper and git intents", s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(1, participant.GitRouting, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutParticipant(1, participant.Helper, participant.Intent, nil)
	}))
	ok(t, "helper staged", s.Update(func(tx *Tx) error { return tx.StageProcess(1, participant.Helper, "helper", helpProc) }))
	mustRefuse(t, "commit another identity", s.Update(func(tx *Tx) error {
		return tx.CommitProcess(1, participant.Helper, "helper", proc(71))
	}))
	mustRefuse(t, "acquired edge committed without staging", s.Update(func(tx *Tx) error {
		return tx.CommitProcess(1, participant.GitRouting, "daemon", gitD)
	}))
	mustRefuse(t, "stage in the intent's own transaction", s.Update(func(tx *Tx) error {
		if err := tx.PutParticipant(1, participant.Network, participant.Intent, nil); err != nil {
			return err
		}
		return tx.CommitProcess(1, participant.Network, "supervisor", rsProc) // the right RS, but the intent is not durable yet
	}))
	if err := s.Update(func(tx *Tx) error { return tx.StageProcess(1, participant.Helper, "no_such_slot", helpProc) }); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("unknown slot: %v", err)
	}
	// Sessions.
	ok(t, "session intent", s.Update(func(tx *Tx) error { return tx.PutSessionTerminal(1, "s1", participant.Intent, nil) }))
	ok(t, "exec staged", s.Update(func(tx *Tx) error { return tx.StageSessionProcess(1, "s1", "exec_client", execProc) }))
	ok(t, "hc direct", s.Update(func(tx *Tx) error { return tx.CommitSessionProcess(1, "s1", "coordinator", hcProc) }))
	mustRefuse(t, "exec replaced", s.Update(func(tx *Tx) error { return tx.StageSessionProcess(1, "s1", "exec_client", proc(72)) }))
}
