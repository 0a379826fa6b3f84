package hc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// TerminalPhase is the state of one Session Terminal record (spec §3.3):
//
//	Intent ──exec client + guest group identified──▶ Running
//	   │                                                │
//	   └──failure before Running──▶ ReleaseIntent ◀──close, connection/PTY/exec loss
//	                                     │
//	                                     └──group, exec client and PTY absent──▶ Clean
//
// Terminal events are admitted only in Running. ReleaseIntent keeps every
// identity recorded at Running.
type TerminalPhase int

const (
	TerminalNone TerminalPhase = iota
	TerminalIntent
	TerminalRunning
	TerminalReleaseIntent
	TerminalClean
)

func (p TerminalPhase) String() string {
	switch p {
	case TerminalIntent:
		return "intent"
	case TerminalRunning:
		return "running"
	case TerminalReleaseIntent:
		return "release_intent"
	case TerminalClean:
		return "clean"
	}
	return "none"
}

// TerminalIdentity is what a Running Session Terminal record names: the
// exact exec client (host pidfs identity), the PTY, the container and the
// guest process group with its leader (pid and start time in the sandbox's
// PID namespace, read from the guest's /proc/<pid>/stat).
type TerminalIdentity struct {
	SessionID  string
	Generation uint64
	Container  string
	ExecClient pidfs.Identity
	// PTY names the host PTY (its slave's pts index).
	PTY string
	// GuestLeaderPID is the leader's pid as --internal-pid-file reports it.
	GuestLeaderPID int
	// GuestLeaderStart is field 22 of the guest /proc/<pid>/stat (clock
	// ticks since the sandbox booted): the leader's identity together with
	// its pid within one generation.
	GuestLeaderStart uint64
	// GuestPGID is the process group; equal to GuestLeaderPID (verified).
	GuestPGID int
}

// TerminalRecorder persists Session Terminal transitions. The Domain Store
// implements it with one transaction per call (RecordRunning also promotes
// the staged exec-client ownership to committed); until it lands,
// memoryTerminals keeps the records in memory. Every method returns an
// error only if the transition could not be recorded; the caller then
// refuses the step (before Running) or keeps the record in release.
type TerminalRecorder interface {
	RecordIntent(ctx context.Context, sessionID string, generation uint64) error
	// RecordStaged records the exec client's Staged ownership
	// (CausalChildAcquisitionV1 step 6) before its barrier is released.
	RecordStaged(ctx context.Context, sessionID string, execClient pidfs.Identity) error
	RecordRunning(ctx context.Context, id TerminalIdentity) error
	RecordReleaseIntent(ctx context.Context, sessionID string) error
	RecordClean(ctx context.Context, sessionID string) error
}

// memoryTerminals is the in-memory TerminalRecorder: it enforces the
// transition order and retains identities through release.
type memoryTerminals struct {
	log *slog.Logger
	mu  sync.Mutex
	rec map[string]*terminalRecord
}

type terminalRecord struct {
	phase      TerminalPhase
	generation uint64
	id         TerminalIdentity
}

func newMemoryTerminals(log *slog.Logger) *memoryTerminals {
	return &memoryTerminals{log: log, rec: map[string]*terminalRecord{}}
}

func (m *memoryTerminals) transition(sessionID string, from []TerminalPhase, to TerminalPhase, f func(*terminalRecord)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rec[sessionID]
	cur := TerminalNone
	if r != nil {
		cur = r.phase
	}
	for _, p := range from {
		if p == cur {
			if r == nil {
				r = &terminalRecord{}
				m.rec[sessionID] = r
			}
			r.phase = to
			if f != nil {
				f(r)
			}
			m.log.Debug("session terminal", "session_id", sessionID, "phase", to.String())
			return nil
		}
	}
	return errdefs.Mark(fmt.Errorf("session terminal %s: %s → %s is not a valid transition", sessionID, cur, to), errdefs.ErrInternal)
}

func (m *memoryTerminals) RecordIntent(_ context.Context, sessionID string, generation uint64) error {
	return m.transition(sessionID, []TerminalPhase{TerminalNone}, TerminalIntent, func(r *terminalRecord) { r.generation = generation })
}

func (m *memoryTerminals) RecordStaged(_ context.Context, sessionID string, _ pidfs.Identity) error {
	return m.transition(sessionID, []TerminalPhase{TerminalIntent}, TerminalIntent, nil)
}

func (m *memoryTerminals) RecordRunning(_ context.Context, id TerminalIdentity) error {
	m.mu.Lock()
	r := m.rec[id.SessionID]
	m.mu.Unlock()
	if r != nil && r.generation != id.Generation {
		return errdefs.New(errdefs.ErrInternal, "session terminal %s: generation %d recorded at intent, %d at running", id.SessionID, r.generation, id.Generation)
	}
	if id.GuestPGID != id.GuestLeaderPID || id.GuestLeaderPID <= 0 {
		return errdefs.New(errdefs.ErrInternal, "session terminal %s: guest leader %d is not its group's leader (pgid %d)", id.SessionID, id.GuestLeaderPID, id.GuestPGID)
	}
	return m.transition(id.SessionID, []TerminalPhase{TerminalIntent}, TerminalRunning, func(r *terminalRecord) { r.id = id })
}

func (m *memoryTerminals) RecordReleaseIntent(_ context.Context, sessionID string) error {
	return m.transition(sessionID, []TerminalPhase{TerminalIntent, TerminalRunning}, TerminalReleaseIntent, nil)
}

func (m *memoryTerminals) RecordClean(_ context.Context, sessionID string) error {
	if err := m.transition(sessionID, []TerminalPhase{TerminalReleaseIntent}, TerminalClean, nil); err != nil {
		return err
	}
	// A Clean record has no further use in memory.
	m.mu.Lock()
	delete(m.rec, sessionID)
	m.mu.Unlock()
	return nil
}

// phase reports a session's current phase (TerminalNone if unknown).
func (m *memoryTerminals) phase(sessionID string) TerminalPhase {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.rec[sessionID]; r != nil {
		return r.phase
	}
	return TerminalNone
}
