package preparedlower

// Model-trace emission of the PreparedLower steps (tla/PreparedLower.tla)
// the Host Coordinator takes: the supervisor's slot, the lease and anchor
// acquisition, publication, release, and bootstrap recovery of a dead
// generation. steps is what this Service recorded of its own generation;
// it decides which model action a code path refines (a supervisor gone
// without having reported its anchors unmounted is the model's supervisor
// loss, after which the release is recovery). Fields are guarded by s.mu;
// every method is a no-op when recording is off.

import (
	"slices"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/modeltrace"
)

type phase int

const (
	phaseStarting phase = iota
	phaseReady
	phaseStopping
	phaseRecovering
	phaseDone
)

type steps struct {
	phase    phase
	artifact string   // the artifact the lease names (AcquireLeaseIntent)
	rs       bool     // SpawnSupervisor recorded, RS not yet gone
	slot     bool     // RS's slot staged or committed, not yet cleared
	lower    bool     // prepared_lower recorded and not yet Clean
	anchor   bool     // state_anchor recorded and not yet Clean
	mounts   []uint64 // the anchor mounts RS reported (AnchorsMounted)
}

func (s *Service) dom() string { return string(s.cfg.Domain) }

// emitLocked records action for this generation (s.mu held).
func (s *Service) emitLocked(action string) {
	modeltrace.EmitGeneration(s.dom(), s.gen, s.pl.artifact, action)
}

// emitGen records action for generation gen (bootstrap recovery, release).
func (s *Service) emitGen(gen uint64, artifact, action string, reconcile bool) {
	if reconcile {
		modeltrace.EmitGenerationReconcile(s.dom(), gen, artifact, action)
		return
	}
	modeltrace.EmitGeneration(s.dom(), gen, artifact, action)
}

// step records, for this generation, actions under s.mu after update
// adjusted the steps.
func (s *Service) step(update func(*steps), actions ...string) {
	if !modeltrace.On() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if update != nil {
		update(&s.pl)
	}
	for _, a := range actions {
		s.emitLocked(a)
	}
}

// commitStep makes a durable change (commit) and then records the model
// steps it is (step's update and actions) as one section that a failpoint
// kill in another goroutine of this coordinator does not cut in two
// (failpoint.Hold): the lease's steps run beside the connectivity
// helper's and the Git-routing daemon's starts, whose failpoints would
// otherwise leave a trace without a step the store holds (or, for a step
// recorded before its commit, with one it does not).
func (s *Service) commitStep(commit func() error, update func(*steps), actions ...string) error {
	end := failpoint.Hold()
	defer end()
	if err := commit(); err != nil {
		return err
	}
	s.step(update, actions...)
	return nil
}

// SupervisorSpawned records SpawnSupervisor: RS exists, staged in the
// sandbox record, held at its barrier.
func (s *Service) SupervisorSpawned() {
	s.step(func(p *steps) { p.rs, p.slot = true, true }, "SpawnSupervisor")
}

// SupervisorSlotCleared records ClearSupervisorSlot once the sandbox
// record is Clean after RS was reaped.
func (s *Service) SupervisorSlotCleared() {
	s.step(func(p *steps) {
		if p.slot && !p.rs {
			p.slot = false
			s.emitLocked("ClearSupervisorSlot")
		}
	})
}

// SupervisorStoppedUnused records StopSupervisor for an RS the broker
// staged and stopped after its acquisition failed, before anything of it
// was used.
func (s *Service) SupervisorStoppedUnused() {
	s.step(func(p *steps) {
		if p.rs && p.phase == phaseStopping {
			p.rs = false
			s.emitLocked("StopSupervisor")
		}
	})
}

// Published records PublishGeneration with the Domain's publication.
func (s *Service) Published() {
	s.step(func(p *steps) {
		if p.phase == phaseStarting {
			s.emitLocked("PublishGeneration")
			p.phase = phaseReady
		}
	})
}

// SupervisorGone records how RS's end appears in PreparedLower: in a
// release, a supervisor that reported every anchor mount it created
// unmounted (SupervisorStopped) was stopped by this coordinator
// (StopSupervisor); any other end — a crash, a SIGKILL, an exit after a
// failure that left its mounts to the death of its mount namespace — is
// the model's supervisor loss, from which this coordinator recovers.
func (s *Service) SupervisorGone(stopped bool) {
	if !modeltrace.On() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.pl.rs {
		return
	}
	s.pl.rs = false
	unmounted := true
	for _, id := range s.pl.mounts {
		if !slices.Contains(s.unmounted, id) {
			unmounted = false
		}
	}
	if s.pl.phase == phaseStopping && stopped && unmounted {
		s.emitLocked("StopSupervisor")
		return
	}
	s.emitLocked("HardLoseSupervisor")
	s.emitLocked("BeginRecovery")
	s.pl.phase = phaseRecovering
}

// recovering reports whether this generation's release is recovery.
func (s *Service) recovering() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pl.phase == phaseRecovering
}

// Finish records FinishGeneration once every participant of the
// generation was released and RS's slot cleared.
func (s *Service) Finish() {
	s.step(func(p *steps) {
		if (p.phase == phaseStopping || p.phase == phaseRecovering) && !p.rs && !p.slot && !p.lower && !p.anchor {
			s.emitLocked("FinishGeneration")
			p.phase = phaseDone
		}
	})
}

// BootstrapRecovery records that this coordinator, holding the Domain
// lock, recovers dead generation gen (a reconcile step: it continues a
// recovery its predecessor began, or follows a loss the replay infers).
func (s *Service) BootstrapRecovery(gen uint64) {
	if modeltrace.On() {
		s.emitGen(gen, "", "BootstrapRecoveryCoordinator", true)
	}
}

// Recovered records the end of bootstrap recovery of generation gen: its
// supervisor's slot cleared with the sandbox record (a reconcile step: a
// generation that failed before staging its supervisor had none) and the
// generation finished.
func (s *Service) Recovered(gen uint64) {
	if modeltrace.On() {
		s.emitGen(gen, "", "ClearSupervisorSlot", true)
		s.emitGen(gen, "", "FinishGeneration", false)
	}
}

// recordReclaim records how RecoverReclaim settled an interrupted
// reclamation of artifact id before this generation leases it (inside the
// catalog transaction): completed (ReclaimArtifact) or rolled back, its
// tree never having left (RollbackReclaim).
func (s *Service) recordReclaim(out catalog.ReclaimOutcome, id string) {
	switch out {
	case catalog.Completed:
		modeltrace.EmitArtifact(s.dom(), s.gen, "ReclaimArtifact", id)
	case catalog.RolledBack:
		modeltrace.EmitArtifact(s.dom(), s.gen, "RollbackReclaim", id)
	}
}
