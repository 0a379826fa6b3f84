package hc

import (
	"context"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

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

// TerminalRecorder persists Session Terminal transitions (spec §3.3). The
// Domain Store implements it (storeTerminals) with one transaction per
// call, under the participant rules of the session_terminal role:
//
//	Intent ──exec client + guest group identified──▶ Running
//	   │                                                │
//	   └──failure before Running──▶ ReleaseIntent ◀──close, connection/PTY/exec loss
//	                                     │
//	                                     └──group, exec client and PTY absent──▶ Clean
//
// Terminal events are admitted only in Running; ReleaseIntent keeps every
// identity recorded at Running, and RecordRunning also promotes the staged
// exec-client ownership to committed. Every method returns an error only if
// the transition could not be recorded; the caller then refuses the step
// (before Running) or keeps the record in release.
type TerminalRecorder interface {
	RecordIntent(ctx context.Context, sessionID string, generation uint64) error
	// RecordStaged records the exec client's Staged ownership
	// (CausalChildAcquisitionV1 step 6) before its barrier is released.
	RecordStaged(ctx context.Context, sessionID string, execClient pidfs.Identity) error
	RecordRunning(ctx context.Context, id TerminalIdentity) error
	RecordReleaseIntent(ctx context.Context, sessionID string) error
	RecordClean(ctx context.Context, sessionID string) error
}
