package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/trust"
)

// Role is the sandbox participant's driver as the coordinator drives it.
type Role interface {
	Begin(g Generation)
	SupervisorStaged(rs pidfs.Identity) error
	SupervisorMessage(ctx context.Context, m *lv1.SupervisorMessage) error
	Commit(tx *store.Tx, r *lv1.SandboxReady) error
	Release() error
	Clean(rs *proc.Child) ([]pidfs.Authority, error)
	Recover(gen uint64, proven func()) Recovery
}

var _ Role = (*Service)(nil)

// Config is what the role needs from its coordinator.
type Config struct {
	Log   *slog.Logger
	Store *store.Store
	// Domain is this Domain's ID (its runsc container IDs and staged
	// ownership reports name it).
	Domain domain.ID
	// Coordinator is this coordinator's identity (the record's coordinator
	// slot).
	Coordinator pidfs.Identity
	// Runtime is runsc as this generation runs it: its path, global flags
	// and state directory (Runtime.Root).
	Runtime runsc.Runtime
	// Supervisor returns RS's identity once it is spawned.
	Supervisor func() pidfs.Identity
	// AwaitAbsence proves a recorded process gone (PidfsRecoveryMatch),
	// stopping it through the matched pidfd if it outlives the wait.
	AwaitAbsence func(pidfs.Identity) error
	// RecoveryWait bounds how long a runsc state pid of a generation that
	// never recorded its identity may take to become free.
	RecoveryWait time.Duration
	// Attach runs after the attached runsc's staged ownership is recorded
	// and before it is acknowledged: the sandbox joins RS's network
	// namespace at boot, so runsc runs only once it is configured.
	Attach func() error
	// Sign signs a record as this coordinator; Send sends a message to RS.
	Sign func(record string, payload []byte) ([]byte, error)
	Send func(context.Context, *lv1.CoordinatorMessage) error
}

// Generation names the generation the Service drives.
type Generation struct {
	Number        uint64
	CoordinatorID string
}

// Service drives one generation's sandbox participant and the recovery of
// dead generations' ones.
type Service struct {
	cfg       Config
	log       *slog.Logger
	gen       Generation
	container string // runsc's container ID of gen (Begin)

	mu     sync.Mutex
	staged *lv1.StagedProcessOwnership
	ready  *lv1.SandboxReady
}

// New returns the role's Service over an open Domain Store.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.RecoveryWait == 0 {
		cfg.RecoveryWait = 10 * time.Second
	}
	return &Service{cfg: cfg, log: cfg.Log}
}

// Begin binds the Service to this coordinator's new generation, before RS
// is spawned, and names its runsc container.
func (s *Service) Begin(g Generation) {
	s.gen = g
	// Recovery of dead generations (logged with recovered_generation)
	// precedes Begin; from here on the role's lines name its generation.
	s.log = s.cfg.Log.With("generation", g.Number)
	s.container = runsc.ContainerID(string(s.cfg.Domain), g.Number)
}

// Runtime returns runsc as the generation runs it (the zero Runtime on a
// nil Service: a coordinator whose store never opened).
func (s *Service) Runtime() runsc.Runtime {
	if s == nil {
		return runsc.Runtime{}
	}
	return s.cfg.Runtime
}

// Container returns the generation's runsc container ID ("" before Begin,
// or on a nil Service: a coordinator whose store never opened).
func (s *Service) Container() string {
	if s == nil {
		return ""
	}
	return s.container
}

// PutIntent records the sandbox participant's bare Intent in the
// transaction that creates generation gen: durable intent before any
// external resource of it exists.
func PutIntent(tx *store.Tx, gen uint64) error {
	return tx.PutParticipant(gen, participant.Sandbox, participant.Intent, nil)
}

// StagedRunsc returns the attached runsc's staged ownership, nil before.
func (s *Service) StagedRunsc() *lv1.StagedProcessOwnership {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.staged
}

// Ready returns the SandboxReady accepted, nil before.
func (s *Service) Ready() *lv1.SandboxReady {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// SupervisorStaged records RS's staged slot, once the broker spawned it
// (held at its barrier).
func (s *Service) SupervisorStaged(rs pidfs.Identity) error {
	return s.record(participant.Intent, store.StagedSlot(rs), unassignedSlot(), nil)
}

// SupervisorMessage handles the RS reports this role owns: the attached
// runsc's StagedProcessOwnership (signature already verified by the
// coordinator), recorded and acknowledged, and SandboxReady, checked
// against what was staged.
func (s *Service) SupervisorMessage(ctx context.Context, m *lv1.SupervisorMessage) error {
	switch m.GetMsg().(type) {
	case *lv1.SupervisorMessage_Staged:
		return s.commitStaged(ctx, m.GetStaged())
	case *lv1.SupervisorMessage_Ready:
		return s.acceptReady(m.GetReady())
	}
	return errdefs.New(errdefs.ErrInvalid, "the sandbox role does not handle %T", m.GetMsg())
}

// commitStaged records the attached runsc's staged ownership and
// acknowledges it with an exact echo (CausalChildAcquisitionV1 step 6).
func (s *Service) commitStaged(ctx context.Context, o *lv1.StagedProcessOwnership) error {
	if o.DomainId != string(s.cfg.Domain) || o.Generation != s.gen.Number || o.CoordinatorId != s.gen.CoordinatorID || o.Slot != "attached_runsc" {
		return errdefs.New(errdefs.ErrRefused, "staged ownership for %s/%d/%s/%s does not match this generation", o.DomainId, o.Generation, o.CoordinatorId, o.Slot)
	}
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return err
	}
	if o.Identity == nil || string(o.Identity.BootId) != string(boot[:]) {
		return errdefs.New(errdefs.ErrRefused, "staged attached runsc identity is not of this boot")
	}
	s.mu.Lock()
	dup := s.staged != nil
	if !dup {
		s.staged = o
	}
	s.mu.Unlock()
	if dup {
		return errdefs.New(errdefs.ErrRefused, "duplicate staged attached runsc ownership")
	}
	runscID, err := store.IdentityFromProto(o.Identity)
	if err != nil {
		return err
	}
	if err := s.record(participant.Intent, store.CommittedSlot(s.cfg.Supervisor()), store.StagedSlot(runscID), nil); err != nil {
		return err
	}
	failpoint.Hit("lazaret-hc:staged-recorded")
	if s.cfg.Attach != nil {
		if err := s.cfg.Attach(); err != nil {
			return err
		}
	}
	ack := &lv1.ProcessOwnershipCommitAck{DomainId: o.DomainId, Generation: o.Generation, CoordinatorId: o.CoordinatorId, Slot: o.Slot, Identity: o.Identity}
	ackPayload, err := fdpass.SigningPayload(ack)
	if err != nil {
		return err
	}
	if ack.Signature, err = s.cfg.Sign(trust.RecordProcessOwnershipCommitAck, ackPayload); err != nil {
		return err
	}
	return s.cfg.Send(ctx, &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Ack{Ack: ack}})
}

// acceptReady checks that SandboxReady names the attached runsc staged.
func (s *Service) acceptReady(r *lv1.SandboxReady) error {
	s.mu.Lock()
	ok := s.staged != nil && equalIdentity(s.staged.Identity, r.AttachedRunsc)
	s.ready = r
	s.mu.Unlock()
	if !ok {
		return errdefs.New(errdefs.ErrRefused, "SandboxReady names an attached runsc that was not staged")
	}
	return nil
}

// Commit is step 9: once every role accepted SandboxReady, it commits in
// tx (the coordinator's one transaction of the publication) the exact
// staged RS and attached runsc ownership with the container and runsc's
// sandbox and gofer identities RS reported.
func (s *Service) Commit(tx *store.Tx, r *lv1.SandboxReady) error {
	s.mu.Lock()
	staged := s.staged
	s.mu.Unlock()
	if staged == nil {
		return errdefs.New(errdefs.ErrRefused, "SandboxReady names an attached runsc that was not staged")
	}
	runscID, err := store.IdentityFromProto(staged.Identity)
	if err != nil {
		return err
	}
	rs := s.cfg.Supervisor()
	kids, err := runscChildren(r, runscID, rs)
	if err != nil {
		return err
	}
	container := s.container
	return tx.PutParticipant(s.gen.Number, participant.Sandbox, participant.Committed, s.snapshot(store.CommittedSlot(rs), store.CommittedSlot(runscID), &container,
		store.CommittedSlot(kids[0]), store.CommittedSlot(kids[1])))
}

// record writes the sandbox participant's next snapshot in a transaction
// of its own.
func (s *Service) record(phase participant.Phase, rs, runsc *lv1.ProcessSlotV1, container *string) error {
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		return tx.PutParticipant(s.gen.Number, participant.Sandbox, phase, s.snapshot(rs, runsc, container))
	})
}

// snapshot is the sandbox participant's snapshot; kids are runsc's
// sandbox and gofer slots (none before SandboxReady).
func (s *Service) snapshot(rs, runsc *lv1.ProcessSlotV1, container *string, kids ...*lv1.ProcessSlotV1) *lv1.RoleSnapshotV1 {
	snap := &lv1.SandboxSnapshotV1{Coordinator: store.CommittedSlot(s.cfg.Coordinator), Supervisor: rs, Runsc: runsc, ContainerId: container}
	if len(kids) == 2 {
		snap.RunscSandbox, snap.RunscGofer = kids[0], kids[1]
	}
	return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Sandbox{Sandbox: snap}}
}

// Release records ReleaseIntent (keeping every identity) before the
// sandbox is stopped; a participant that never left bare Intent stays so.
func (s *Service) Release() error {
	return s.cfg.Store.Update(s.ReleaseTx)
}

// ReleaseTx is Release within tx (the teardown records every release
// intent in one transaction).
func (s *Service) ReleaseTx(tx *store.Tx) error {
	_, err := tx.ReleaseHeld(s.gen.Number, participant.Sandbox)
	return err
}

// ErrNotProven says a process of the sandbox is not proven absent: the
// record stays in ReleaseIntent for the next bootstrap recovery.
var ErrNotProven = errors.New("sandbox processes not proven absent")

// Clean proves the generation's sandbox processes gone after teardown: RS
// was reaped by this coordinator (exact absence), the attached runsc, its
// sandbox and gofer are matched absent (then runsc's state is removed). It
// returns the authorities proven absent, with this coordinator's own, for
// MarkClean; an error (wrapping ErrNotProven) leaves the record as it is.
// refusals of runsc's children are returned joined in the error.
func (s *Service) Clean(rs *proc.Child) ([]pidfs.Authority, error) {
	absent := []pidfs.Authority{s.cfg.Coordinator.Authority}
	if rs != nil {
		select {
		case <-rs.Done():
			absent = append(absent, rs.Identity().Authority)
		default:
			return nil, fmt.Errorf("%w: runtime supervisor not reaped", ErrNotProven)
		}
	}
	if staged := s.StagedRunsc(); staged != nil {
		id, err := store.IdentityFromProto(staged.Identity)
		if err == nil {
			err = s.cfg.AwaitAbsence(id)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: attached runsc: %v", ErrNotProven, err)
		}
		absent = append(absent, id.Authority)
	}
	var slots map[string]participant.Slot
	s.cfg.Store.View(func(tx *store.Tx) error {
		if p, err := tx.Participant(s.gen.Number, participant.Sandbox); err == nil {
			slots = p.View.Slots
		}
		return nil
	})
	kids, refusals := s.ReconcileRunsc(s.gen.Number, s.container, slots)
	if len(refusals) > 0 {
		return nil, &RunscRefusal{Refusals: refusals}
	}
	return append(absent, kids...), nil
}

// RunscRefusal is Clean's error when runsc's sandbox or gofer is not
// proven absent: recovery reports it as a retained record.
type RunscRefusal struct{ Refusals []string }

func (e *RunscRefusal) Error() string {
	return fmt.Sprintf("runsc sandbox or gofer absence not proven: %s", joinRefusals(e.Refusals))
}

func (e *RunscRefusal) Unwrap() error { return ErrNotProven }

// MarkClean records generation gen's sandbox Clean once RS and the
// attached runsc were reaped or matched absent; the coordinator's own
// ownership role ends with this record.
func (s *Service) MarkClean(gen uint64, detail string, absent []pidfs.Authority) error {
	return s.cfg.Store.Update(func(tx *store.Tx) error {
		return tx.ReleaseAndClean(gen, participant.Sandbox, detail, absent)
	})
}

func unassignedSlot() *lv1.ProcessSlotV1 {
	return &lv1.ProcessSlotV1{State: &lv1.ProcessSlotV1_Unassigned{Unassigned: &lv1.UnassignedV1{}}}
}

func equalIdentity(a, b *lv1.PidfsProcessIdentityV1) bool {
	return a != nil && b != nil && string(a.BootId) == string(b.BootId) && a.PidfsStDev == b.PidfsStDev && a.PidfsStIno == b.PidfsStIno && a.HostPid == b.HostPid
}

// runscChildren validates the runsc sandbox and gofer identities RS proved
// and reported in SandboxReady: both present, of this boot, and distinct
// from each other, from the attached runsc client and from RS. They are
// recorded with the Committed client and are the only authority by which
// any later Lazaret process acts on them.
func runscChildren(r *lv1.SandboxReady, client, rs pidfs.Identity) ([2]pidfs.Identity, error) {
	var out [2]pidfs.Identity
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return out, err
	}
	seen := map[pidfs.Authority]string{client.Authority: "the attached runsc client", rs.Authority: "the runtime supervisor"}
	for i, p := range []*lv1.PidfsProcessIdentityV1{r.GetRunscSandbox(), r.GetRunscGofer()} {
		name := [2]string{"runsc sandbox", "runsc gofer"}[i]
		if p == nil {
			return out, errdefs.New(errdefs.ErrRefused, "SandboxReady names no %s identity", name)
		}
		id, err := store.IdentityFromProto(p)
		if err != nil {
			return out, fmt.Errorf("SandboxReady %s: %w", name, err)
		}
		if err := participant.ValidIdentity(id); err != nil || id.BootID != boot {
			return out, errdefs.New(errdefs.ErrRefused, "SandboxReady %s identity %s is not a current pidfs identity of this boot (%v)", name, id, err)
		}
		if other, dup := seen[id.Authority]; dup {
			return out, errdefs.New(errdefs.ErrRefused, "SandboxReady %s identity %s is %s's", name, id, other)
		}
		seen[id.Authority] = name
		out[i] = id
	}
	return out, nil
}
