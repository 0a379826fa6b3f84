package hc

// The coordinator's seam toward its model-trace steps (package
// modelsteps): the Lazaret actions it records outside them, and the steps
// that run outside c.mu, taken under it here (the steps are recorded under
// the lock under which the state they describe changes).

import (
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// emit records action(args) for this generation.
func (c *coordinator) emit(action string, args ...string) {
	modeltrace.Emit(string(c.paths.ID), c.generation, action, args...)
}

func (c *coordinator) dom() string { return string(c.paths.ID) }

// mtStartDomain records the bootstrap recovery of the previous generation
// and StartNewDomain for the session that started this coordinator.
func (c *coordinator) mtStartDomain(prev uint64, getenv func(string) string) {
	if !modeltrace.On() {
		return
	}
	retained := prev != 0 && c.recovery.isRetained(prev)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mt.Bind(c.dom(), c.generation)
	c.mt.StartDomain(prev, retained, getenv(modeltrace.EnvSession))
}

// mtRejectMismatch records RejectConfigurationMismatch (modelsteps).
func (c *coordinator) mtRejectMismatch(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mt.RejectMismatch(key)
}

// mtSupervisorGone records how RS's exit appears in the model; killed:
// this coordinator SIGKILLed RS.
func (c *coordinator) mtSupervisorGone(st pidfs.ExitStatus, stopped, killed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mt.SupervisorGone(st, stopped, killed)
}

// mtFinish records the end of this generation.
func (c *coordinator) mtFinish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mt.Finish()
}
