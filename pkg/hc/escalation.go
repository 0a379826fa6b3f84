package hc

// The coordinator's seam toward the host escalation role (package
// escalation): what the role needs from the coordinator — its live
// sessions, the broker that launches host processes, the model-trace lock
// and session keys. The terminal loop's side of the HostProcess and Prompt
// routes is in terminal.go.

import (
	"context"
	"time"

	"github.com/lazaret/lazaret/pkg/hc/escalation"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/proc"
)

// newEscalation starts the generation's escalation service.
func (c *coordinator) newEscalation() (*escalation.Service, error) {
	return escalation.New(escalation.Config{
		Log: c.log, Anchor: c.anchor,
		RuntimeDir: c.paths.RuntimeDir, ControlMount: c.paths.ControlMountSource(), DomainRoot: c.paths.DomainRoot,
		Workspace: c.cfg.workspace, Rules: c.cfg.profile.AutoApprove,
		Sessions: escSessions{c}, Launcher: escLauncher{c}, Model: escModel{c},
		TerminalWait: identifyTimeout + 5*time.Second, DrainTimeout: drainTimeout,
	})
}

// escSessions is the coordinator's session table as the role sees it.
type escSessions struct{ c *coordinator }

func (v escSessions) Session(id string) (live, interactive bool) {
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	s, _ := v.c.sessions.Get(id)
	return s != nil, s != nil && s.tty
}

// escLauncher acquires host processes through the coordinator's broker.
type escLauncher struct{ c *coordinator }

func (l escLauncher) Acquire(ctx context.Context, spec proc.AcquireSpec) (*proc.Child, error) {
	return l.c.broker.Acquire(ctx, spec)
}

// escModel records the role's model steps under c.mu, the lock under
// which DisconnectSession and FailDomain are recorded.
type escModel struct{ c *coordinator }

func (m escModel) Lock()   { m.c.mu.Lock() }
func (m escModel) Unlock() { m.c.mu.Unlock() }

func (m escModel) SessionKey(id string) (string, bool) {
	s, _ := m.c.sessions.Get(id)
	if s == nil {
		return "", false
	}
	return s.mtKey, true
}

func (m escModel) Attached(key string) bool { return m.c.mt.Attached(key) }

func (m escModel) Emit(facts map[string]string, action string, args ...string) {
	modeltrace.EmitFacts(m.c.dom(), m.c.generation, facts, action, args...)
}
