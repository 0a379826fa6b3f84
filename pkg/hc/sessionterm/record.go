package sessionterm

import (
	"context"
	"errors"
	"fmt"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// Identity is what a Running Session Terminal record names: the exact exec
// client (host pidfs identity), the PTY, the container and the guest
// process group with its leader (pid and start time in the sandbox's PID
// namespace, read from the guest's /proc/<pid>/stat).
type Identity struct {
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

// Recorder persists Session Terminal transitions. The Domain Store
// implements it (StoreRecorder) with one transaction per call, under the
// participant rules of the session_terminal role:
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
type Recorder interface {
	RecordIntent(ctx context.Context, sessionID string, generation uint64) error
	// RecordStaged records the exec client's Staged ownership
	// (CausalChildAcquisitionV1 step 6) before its barrier is released.
	RecordStaged(ctx context.Context, sessionID string, execClient pidfs.Identity) error
	RecordRunning(ctx context.Context, id Identity) error
	RecordReleaseIntent(ctx context.Context, sessionID string) error
	RecordClean(ctx context.Context, sessionID string) error
}

// StoreRecorder records one generation's Session Terminals in the Domain
// Store, one transaction per transition (the acquisition and release
// orderings of a Session Terminal).
type StoreRecorder struct {
	Store      *store.Store
	Generation uint64
	// Coordinator is the Host Coordinator's own identity: the committed
	// coordinator slot of every record it writes.
	Coordinator pidfs.Identity
}

var _ Recorder = StoreRecorder{}

func (r StoreRecorder) RecordIntent(_ context.Context, sessionID string, gen uint64) error {
	return r.Store.Update(func(tx *store.Tx) error { return tx.PutSessionTerminal(gen, sessionID, participant.Intent, nil) })
}

func (r StoreRecorder) RecordStaged(_ context.Context, sessionID string, exec pidfs.Identity) error {
	snap := &lv1.SessionTerminalSnapshotV1{Coordinator: store.CommittedSlot(r.Coordinator), ExecClient: store.StagedSlot(exec)}
	return r.Store.Update(func(tx *store.Tx) error {
		return tx.PutSessionTerminal(r.Generation, sessionID, participant.Intent, snap)
	})
}

func (r StoreRecorder) RecordRunning(_ context.Context, id Identity) error {
	var pts uint32
	fmt.Sscanf(id.PTY, "pts/%d", &pts)
	container := id.Container
	snap := &lv1.SessionTerminalSnapshotV1{
		Coordinator: store.CommittedSlot(r.Coordinator), ExecClient: store.CommittedSlot(id.ExecClient),
		Pty:         &lv1.PtyIdentityV1{PtsIndex: pts},
		ContainerId: &container,
		Guest:       &lv1.GuestProcessGroupV1{LeaderPid: uint32(id.GuestLeaderPID), LeaderStartTimeTicks: id.GuestLeaderStart, Pgid: uint32(id.GuestPGID)},
	}
	return r.Store.Update(func(tx *store.Tx) error {
		return tx.PutSessionTerminal(id.Generation, id.SessionID, participant.Running, snap)
	})
}

func (r StoreRecorder) RecordReleaseIntent(_ context.Context, sessionID string) error {
	return r.Store.Update(func(tx *store.Tx) error {
		st, err := tx.SessionTerminal(r.Generation, sessionID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil || st.Snapshot == nil || st.Phase == participant.ReleaseIntent {
			return err
		}
		return tx.ReleaseSessionTerminal(r.Generation, sessionID)
	})
}

// RecordClean is called only once the caller observed the guest group, the
// exec client and the PTY absent; the proof names every recorded identity.
func (r StoreRecorder) RecordClean(_ context.Context, sessionID string) error {
	return r.Store.Update(func(tx *store.Tx) error {
		st, err := tx.SessionTerminal(r.Generation, sessionID)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return tx.CleanSessionTerminal(r.Generation, sessionID, proof(st, "session closed: guest group empty, exec client reaped, PTY master closed"))
	})
}

// proof is the absence proof of a record: every recorded field and process.
func proof(st *store.SessionTerminal, detail string) participant.AbsenceProof {
	if st.Snapshot == nil {
		return participant.AbsenceProof{Kind: participant.AbsenceRuntime, Detail: detail}
	}
	p := participant.AbsenceProof{Kind: participant.AbsenceExact, Detail: detail}
	for f := range st.View.Fields {
		p.Fields = append(p.Fields, f)
	}
	for _, s := range st.View.Slots {
		if s.State != participant.Unassigned && s.Legacy == nil {
			p.Processes = append(p.Processes, s.Identity.Authority)
		}
	}
	return p
}

// Recover reconciles a dead generation's Session Terminals: each recorded
// exec client is matched and proven absent by awaitAbsence (the guest group
// went with the sandbox, which the caller verified gone), then the record
// becomes Clean. It returns why records could not be cleaned (a legacy
// exec client, one not proven absent, a refused transaction); those stay
// as they are.
func Recover(st *store.Store, g uint64, awaitAbsence func(pidfs.Identity) error) []string {
	var sts []*store.SessionTerminal
	if err := st.View(func(tx *store.Tx) error {
		var err error
		sts, err = tx.SessionTerminals(g)
		return err
	}); err != nil {
		return []string{fmt.Sprintf("read session terminals of generation %d: %v", g, err)}
	}
	var refusals []string
	for _, rec := range sts {
		if rec.Phase == participant.Clean {
			continue
		}
		if s, ok := rec.View.Slots["exec_client"]; ok && s.State != participant.Unassigned {
			if s.Legacy != nil {
				refusals = append(refusals, "session "+rec.SessionID+": legacy-unverified exec client")
				continue
			}
			if err := awaitAbsence(s.Identity); err != nil {
				refusals = append(refusals, fmt.Sprintf("session %s exec client %s: %v", rec.SessionID, s.Identity, err))
				continue
			}
		}
		err := st.Update(func(tx *store.Tx) error {
			if rec.Snapshot != nil && rec.Phase != participant.ReleaseIntent {
				if err := tx.ReleaseSessionTerminal(g, rec.SessionID); err != nil {
					return err
				}
			}
			return tx.CleanSessionTerminal(g, rec.SessionID, proof(rec, "bootstrap recovery: sandbox gone, exec client proven absent"))
		})
		if err != nil {
			refusals = append(refusals, "session "+rec.SessionID+": "+err.Error())
		}
	}
	return refusals
}
