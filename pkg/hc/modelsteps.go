package hc

// Model-trace emission (package modeltrace): the Host Coordinator's
// protocol steps in the vocabulary of tla/Lazaret.tla. modelSteps is what
// this coordinator has recorded of its generation — the abstraction of its
// own state that decides which model action a code path refines (a
// teardown after failure is recovery in the model, a teardown after the
// last session left is the ordered teardown). Every method is a no-op when
// recording is off.

import (
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

type modelPhase int

const (
	mAbsent modelPhase = iota
	mStarting
	mReady
	mStopping
	mFailed
)

// mSession is a Client Session's model phase as this coordinator recorded it.
type mSession int

const (
	msWaiting mSession = iota + 1
	msAttached
	msClosed
)

type modelSteps struct {
	phase    modelPhase
	leader   string // the session StartNewDomain named (EnvSession)
	rs       bool   // StartRuntimeSupervisor recorded, RS not yet gone
	sidecar  bool   // StartSidecar recorded (RS then arms the edge and starts the sandbox)
	sessions map[string]mSession
}

// emit records action(args) for this generation.
func (c *coordinator) emit(action string, args ...string) {
	modeltrace.Emit(string(c.paths.ID), c.generation, action, args...)
}

func (c *coordinator) dom() string { return string(c.paths.ID) }

// mtStartDomain records the bootstrap recovery of the previous generation
// (reconcile steps: a generation that ended cleanly makes them stutter)
// and StartNewDomain for the session that started this coordinator.
func (c *coordinator) mtStartDomain(prev uint64, getenv func(string) string) {
	if !modeltrace.On() {
		return
	}
	c.mt.sessions = map[string]mSession{}
	c.mt.leader = getenv(modeltrace.EnvSession)
	switch {
	case prev == 0:
	case c.isRetained(prev):
		// Recovery began but retained a record of the previous
		// generation (fail closed: nothing unproven is signalled or
		// removed), and this generation starts anyway. The model keeps a
		// Domain in recovery until every resource is recovered, so the
		// StartNewDomain below is rejected: tla/MAPPING.md "Gaps",
		// retained generation.
		modeltrace.EmitReconcile(c.dom(), prev, "BootstrapRecoveryCoordinator", c.dom())
	default:
		for _, a := range []string{"BootstrapRecoveryCoordinator", "RecoverSandbox", "RecoverSidecar", "RecoverStateAnchor", "FinishRecovery"} {
			modeltrace.EmitReconcile(c.dom(), prev, a, c.dom())
		}
	}
	c.emit("StartNewDomain", c.mt.leader)
	c.mt.phase = mStarting
	c.mt.sessions[c.mt.leader] = msWaiting
}

// mtFailLocked records FailDomain (c.mu held).
func (c *coordinator) mtFailLocked() {
	if !modeltrace.On() {
		return
	}
	switch c.mt.phase {
	case mStarting, mReady, mStopping:
		c.emit("FailDomain", c.dom())
		c.mt.phase = mFailed
		c.mtCloseAllLocked()
	}
}

func (c *coordinator) mtCloseAllLocked() {
	for k := range c.mt.sessions {
		c.mt.sessions[k] = msClosed
	}
}

// mtPublishLocked records PublishDomain (c.mu held, before ready closes).
func (c *coordinator) mtPublishLocked() {
	if modeltrace.On() && c.mt.phase == mStarting {
		c.emit("PublishDomain", c.dom())
		c.mt.phase = mReady
	}
}

// mtTeardownLocked records what a teardown request is in the model (c.mu
// held): BeginTeardown from Ready once no session is interested; a leader
// that never arrived disconnects first (while starting that fails the
// Domain: the model's lost leader).
func (c *coordinator) mtTeardownLocked() {
	if !modeltrace.On() {
		return
	}
	if c.mt.phase == mStarting || c.mt.phase == mReady {
		for k, s := range c.mt.sessions {
			if s == msWaiting || s == msAttached {
				c.mtDisconnectLocked(k)
			}
		}
	}
	if c.mt.phase == mReady {
		c.emit("BeginTeardown", c.dom())
		c.mt.phase = mStopping
	}
}

// mtAdmitLocked records a session admitted by serveConn (c.mu held).
func (c *coordinator) mtAdmitLocked(key string, running bool) {
	if !modeltrace.On() || c.mt.phase == mFailed {
		return
	}
	if running {
		if c.mt.sessions[key] == msWaiting {
			c.emit("AdvanceWaitingSession", key)
		} else {
			c.emit("StartReadySession", key)
		}
		c.emit("RegisterSession", key)
		c.mt.sessions[key] = msAttached
		return
	}
	if _, ok := c.mt.sessions[key]; !ok {
		c.emit("WaitForDomain", key)
		c.mt.sessions[key] = msWaiting
	}
}

// mtRejectMismatch records RejectConfigurationMismatch for a session
// admit refused because its configuration fingerprint differs from the
// generation's, while the generation starts, runs or stops (the model's
// guard). A refusal once the generation failed takes no model step: the
// session never entered the model (it stays New, a stutter).
func (c *coordinator) mtRejectMismatch(key string) {
	if !modeltrace.On() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.mt.sessions[key]; !seen && (c.mt.phase == mStarting || c.mt.phase == mReady || c.mt.phase == mStopping) {
		c.emit("RejectConfigurationMismatch", key)
		c.mt.sessions[key] = msClosed
	}
}

// mtRegisterLocked records a waiting session's registration once the
// Domain is published (c.mu held).
func (c *coordinator) mtRegisterLocked(key string) {
	if modeltrace.On() && c.mt.phase == mReady && c.mt.sessions[key] == msWaiting {
		c.emit("AdvanceWaitingSession", key)
		c.emit("RegisterSession", key)
		c.mt.sessions[key] = msAttached
	}
}

// mtDisconnectLocked records DisconnectSession (c.mu held).
func (c *coordinator) mtDisconnectLocked(key string) {
	if !modeltrace.On() || c.mt.phase == mFailed {
		return
	}
	if s := c.mt.sessions[key]; s != msWaiting && s != msAttached {
		return
	}
	c.emit("DisconnectSession", key)
	c.mt.sessions[key] = msClosed
	if key == c.mt.leader && c.mt.phase == mStarting {
		// The model's lost leader: a Domain whose starting session went
		// away before publication fails.
		c.mt.phase = mFailed
		c.mtCloseAllLocked()
	}
}

// mtSessionAttached reports whether the session is attached in the model
// (c.mu held).
func (c *coordinator) mtSessionAttached(key string) bool {
	return c.mt.sessions[key] == msAttached && c.mt.phase != mFailed
}

// mtSupervisorGone records how RS's exit appears in the model: a SIGKILL
// this coordinator did not send is the environment's hard loss of RS; in
// an ordered teardown, after SupervisorStopped, RS stopped the sandbox and
// the sidecar's network role with it and unmounted its State Anchors, then
// exited; otherwise (a failed generation) the coordinator terminated the
// runtime. killed: this coordinator SIGKILLed RS.
func (c *coordinator) mtSupervisorGone(st pidfs.ExitStatus, stopped, killed bool) {
	if !modeltrace.On() || !c.mt.rs {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mt.rs = false
	switch {
	case !st.Exited && st.Signal == unix.SIGKILL && !killed:
		c.emit("HardLoseRuntimeSupervisor", c.dom())
		c.mt.phase = mFailed
		c.mtCloseAllLocked()
	case c.mt.phase == mStopping && stopped:
		// Stopping follows publication: sandbox, sidecar and State
		// Anchor were all up.
		c.emit("StopSandbox", c.dom())
		c.emit("StopSidecar", c.dom())
		c.emit("UnmountStateAnchor", c.dom())
		c.emit("GracefulSupervisorExit", c.dom())
	default:
		if c.mt.phase != mFailed {
			c.mtFailLocked()
		}
		c.emit("HostCoordinatorTerminateUnresponsiveRuntime", c.dom())
	}
}

// mtFinish records the end of this generation: FinishTeardown after an
// ordered teardown, the recovery sequence after a failure.
func (c *coordinator) mtFinish() {
	if !modeltrace.On() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.mt.phase {
	case mStopping:
		c.emit("FinishTeardown", c.dom())
	case mStarting, mReady:
		c.mtFailLocked()
		fallthrough
	case mFailed:
		c.emit("BeginRecovery", c.dom())
		for _, a := range []string{"RecoverSandbox", "RecoverSidecar", "RecoverStateAnchor"} {
			modeltrace.EmitReconcile(c.dom(), c.generation, a, c.dom())
		}
		c.emit("FinishRecovery", c.dom())
	}
	c.mt.phase = mAbsent
}
