// Package modelsteps records the Host Coordinator's own protocol steps in
// the model trace (package modeltrace), in the vocabulary of
// tla/Lazaret.tla: the Domain's start, publication, failure, teardown and
// its end, the Client Sessions' admission, registration and disconnection,
// and how the Runtime Supervisor's exit appears in the model.
//
// Steps is what this coordinator has recorded of its generation — the
// abstraction of its own state that decides which model action a code path
// refines (a teardown after failure is recovery in the model, a teardown
// after the last session left is the ordered teardown). Every method is a
// no-op when recording is off. Steps has no lock: the coordinator calls it
// under the lock under which it changes the state the steps describe, so
// the trace's order is the coordinator's.
//
// The role packages record their own models' steps (preparedlower,
// escalation); the coordinator records the other Lazaret actions it
// performs (CreateTrustAnchor, StartSidecar) through Steps.Emit.
package modelsteps

import (
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

type phase int

const (
	absent phase = iota
	starting
	ready
	stopping
	failed
)

// session is a Client Session's model phase as this coordinator recorded it.
type session int

const (
	waiting session = iota + 1
	attached
	closed
)

// Steps is one generation's record of the coordinator's model steps.
type Steps struct {
	domain   string
	gen      uint64
	phase    phase
	leader   string // the session StartNewDomain named (EnvSession)
	rs       bool   // StartRuntimeSupervisor recorded, RS not yet gone
	sessions map[string]session
}

// Bind names the Domain and generation the steps are recorded for.
func (s *Steps) Bind(domain string, gen uint64) { s.domain, s.gen = domain, gen }

// Emit records action(args) for this generation.
func (s *Steps) Emit(action string, args ...string) {
	modeltrace.Emit(s.domain, s.gen, action, args...)
}

// StartDomain records the bootstrap recovery of the previous generation
// prev (reconcile steps: a generation that ended cleanly makes them
// stutter; retained: recovery kept a record of it) and StartNewDomain for
// leader, the session that started this coordinator.
func (s *Steps) StartDomain(prev uint64, retained bool, leader string) {
	if !modeltrace.On() {
		return
	}
	s.sessions = map[string]session{}
	s.leader = leader
	switch {
	case prev == 0:
	case retained:
		// Recovery began but retained a record of the previous
		// generation (fail closed: nothing unproven is signalled or
		// removed), and this generation starts anyway. The model keeps a
		// Domain in recovery until every resource is recovered, so the
		// StartNewDomain below is rejected: tla/MAPPING.md "Gaps",
		// retained generation.
		modeltrace.EmitReconcile(s.domain, prev, "BootstrapRecoveryCoordinator", s.domain)
	default:
		for _, a := range []string{"BootstrapRecoveryCoordinator", "RecoverSandbox", "RecoverSidecar", "RecoverStateAnchor", "FinishRecovery"} {
			modeltrace.EmitReconcile(s.domain, prev, a, s.domain)
		}
	}
	s.Emit("StartNewDomain", s.leader)
	s.phase = starting
	s.sessions[s.leader] = waiting
}

// Fail records FailDomain.
func (s *Steps) Fail() {
	if !modeltrace.On() {
		return
	}
	switch s.phase {
	case starting, ready, stopping:
		s.Emit("FailDomain", s.domain)
		s.phase = failed
		s.closeAll()
	}
}

func (s *Steps) closeAll() {
	for k := range s.sessions {
		s.sessions[k] = closed
	}
}

// Publish records PublishDomain.
func (s *Steps) Publish() {
	if modeltrace.On() && s.phase == starting {
		s.Emit("PublishDomain", s.domain)
		s.phase = ready
	}
}

// Teardown records what a teardown request is in the model: BeginTeardown
// from Ready once no session is interested; a leader that never arrived
// disconnects first (while starting that fails the Domain: the model's
// lost leader).
func (s *Steps) Teardown() {
	if !modeltrace.On() {
		return
	}
	if s.phase == starting || s.phase == ready {
		for k, st := range s.sessions {
			if st == waiting || st == attached {
				s.Disconnect(k)
			}
		}
	}
	if s.phase == ready {
		s.Emit("BeginTeardown", s.domain)
		s.phase = stopping
	}
}

// Admit records a session admitted by the control socket; running: the
// Domain is published.
func (s *Steps) Admit(key string, running bool) {
	if !modeltrace.On() || s.phase == failed {
		return
	}
	if running {
		if s.sessions[key] == waiting {
			s.Emit("AdvanceWaitingSession", key)
		} else {
			s.Emit("StartReadySession", key)
		}
		s.Emit("RegisterSession", key)
		s.sessions[key] = attached
		return
	}
	if _, ok := s.sessions[key]; !ok {
		s.Emit("WaitForDomain", key)
		s.sessions[key] = waiting
	}
}

// RejectMismatch records RejectConfigurationMismatch for a session admit
// refused because its configuration fingerprint differs from the
// generation's, while the generation starts, runs or stops (the model's
// guard). A refusal once the generation failed takes no model step: the
// session never entered the model (it stays New, a stutter).
func (s *Steps) RejectMismatch(key string) {
	if !modeltrace.On() {
		return
	}
	if _, seen := s.sessions[key]; !seen && (s.phase == starting || s.phase == ready || s.phase == stopping) {
		s.Emit("RejectConfigurationMismatch", key)
		s.sessions[key] = closed
	}
}

// Register records a waiting session's registration once the Domain is
// published.
func (s *Steps) Register(key string) {
	if modeltrace.On() && s.phase == ready && s.sessions[key] == waiting {
		s.Emit("AdvanceWaitingSession", key)
		s.Emit("RegisterSession", key)
		s.sessions[key] = attached
	}
}

// Disconnect records DisconnectSession.
func (s *Steps) Disconnect(key string) {
	if !modeltrace.On() || s.phase == failed {
		return
	}
	if st := s.sessions[key]; st != waiting && st != attached {
		return
	}
	s.Emit("DisconnectSession", key)
	s.sessions[key] = closed
	if key == s.leader && s.phase == starting {
		// The model's lost leader: a Domain whose starting session went
		// away before publication fails.
		s.phase = failed
		s.closeAll()
	}
}

// Attached reports whether the session is attached in the model.
func (s *Steps) Attached(key string) bool {
	return s.sessions[key] == attached && s.phase != failed
}

// SupervisorStarted records StartRuntimeSupervisor: RS exists, held at its
// barrier under the lifetime lease.
func (s *Steps) SupervisorStarted() {
	s.Emit("StartRuntimeSupervisor", s.domain)
	s.rs = true
}

// SupervisorGone records how RS's exit appears in the model: a SIGKILL
// this coordinator did not send (killed false) is the environment's hard
// loss of RS; in an ordered teardown, after SupervisorStopped, RS stopped
// the sandbox and the sidecar's network role with it and unmounted its
// State Anchors, then exited; otherwise (a failed generation) the
// coordinator terminated the runtime.
func (s *Steps) SupervisorGone(st pidfs.ExitStatus, stopped, killed bool) {
	if !modeltrace.On() || !s.rs {
		return
	}
	s.rs = false
	switch {
	case !st.Exited && st.Signal == unix.SIGKILL && !killed:
		s.Emit("HardLoseRuntimeSupervisor", s.domain)
		s.phase = failed
		s.closeAll()
	case s.phase == stopping && stopped:
		// Stopping follows publication: sandbox, sidecar and State
		// Anchor were all up.
		s.Emit("StopSandbox", s.domain)
		s.Emit("StopSidecar", s.domain)
		s.Emit("UnmountStateAnchor", s.domain)
		s.Emit("GracefulSupervisorExit", s.domain)
	default:
		if s.phase != failed {
			s.Fail()
		}
		s.Emit("HostCoordinatorTerminateUnresponsiveRuntime", s.domain)
	}
}

// Finish records the end of this generation: FinishTeardown after an
// ordered teardown, the recovery sequence after a failure.
func (s *Steps) Finish() {
	if !modeltrace.On() {
		return
	}
	switch s.phase {
	case stopping:
		s.Emit("FinishTeardown", s.domain)
	case starting, ready:
		s.Fail()
		fallthrough
	case failed:
		s.Emit("BeginRecovery", s.domain)
		for _, a := range []string{"RecoverSandbox", "RecoverSidecar", "RecoverStateAnchor"} {
			modeltrace.EmitReconcile(s.domain, s.gen, a, s.domain)
		}
		s.Emit("FinishRecovery", s.domain)
	}
	s.phase = absent
}
