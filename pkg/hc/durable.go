package hc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/hc/gitrouting"
	"github.com/lazaret/lazaret/pkg/hc/network"
	"github.com/lazaret/lazaret/pkg/hc/preparedlower"
	"github.com/lazaret/lazaret/pkg/hc/publication"
	"github.com/lazaret/lazaret/pkg/hc/sandbox"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
)

// recoveryWait bounds how long bootstrap recovery waits for a surviving
// Runtime Supervisor or attached runsc of a dead generation to finish its
// lease-loss teardown before it stops the exact process itself.
var recoveryWait = 10 * time.Second

// openStore opens the Domain Store with the Domain lock this coordinator
// holds and creates the roles that record in it (the sandbox role runs
// runsc as rt); it refuses a newer schema before reading anything and verifies the
// stored Domain identity (SR-11).
func (c *coordinator) openStore(rt runsc.Runtime) error {
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		return err
	}
	c.self = self.Identity()
	self.Close()
	st, err := store.Open(c.paths.DomainRoot, c.lockFile, store.DomainIdentity{ID: c.paths.ID, Profile: c.prof, CanonicalWorkspace: c.ws}, store.Options{Logger: c.log})
	if err != nil {
		return err
	}
	c.store = st
	c.lower = preparedlower.New(preparedlower.Config{
		Log: c.log, Store: c.store, Domain: c.paths.ID, StorageRoot: c.paths.StorageRoot,
		Image: c.image, PersistentPaths: c.profile.PersistentPaths, Coordinator: c.self,
		Supervisor: func() pidfs.Identity { return c.rs.Identity() },
		Send:       func(ctx context.Context, m *lv1.CoordinatorMessage) error { return c.rs.Send(ctx, m) },
	})
	c.sb = sandbox.New(sandbox.Config{
		Log: c.log, Store: c.store, Domain: c.paths.ID, Coordinator: c.self, Runtime: rt,
		Supervisor:   func() pidfs.Identity { return c.rs.Identity() },
		AwaitAbsence: c.awaitAbsence, RecoveryWait: recoveryWait, Attach: c.attachRunsc,
		// The trust anchor is created after the store opens.
		Sign: func(record string, payload []byte) ([]byte, error) {
			return c.anchor.SignAsCoordinator(record, payload)
		},
		Send: func(ctx context.Context, m *lv1.CoordinatorMessage) error { return c.rs.Send(ctx, m) },
	})
	return nil
}

// beginGeneration records the new generation and the sandbox participant's
// bare Intent — durable intent before any external resource of it exists.
func (c *coordinator) beginGeneration(sandboxID, sidecarID string) error {
	defer func() { c.lower.Begin(c.generation) }()
	return c.store.Update(func(tx *store.Tx) error {
		last, err := tx.LatestGeneration()
		if err != nil {
			return err
		}
		c.generation = last + 1
		if err := tx.CreateGeneration(store.NewGeneration{
			Number: c.generation, ConfigurationFingerprint: []byte(c.profile.Fingerprint()), CoordinatorID: c.coordinator,
			ComponentIDs: []store.ComponentID{{Kind: "agent_sandbox", ID: sandboxID}, {Kind: "network_sidecar", ID: sidecarID}}, Coordinator: c.self,
		}); err != nil {
			return err
		}
		return sandbox.PutIntent(tx, c.generation)
	})
}

// retained lists records recovery refused to act on, with the reason.
type retained struct {
	Generation uint64 `json:"generation"`
	Record     string `json:"record"`
	Reason     string `json:"reason"`
}

// recoverGenerations is bootstrap recovery (FR-7): every earlier generation
// whose sandbox is not Clean is reconciled through PidfsRecoveryMatch only:
// a matched live process (a supervisor still finishing lease-loss teardown)
// is waited for, then stopped through the matched pidfd; an absent, foreign
// or other-boot one is proven gone; anything ambiguous or legacy is
// retained, reported by `lazaret status`, and never signalled. The runsc
// sandbox and gofer are reconciled the same way (sandbox.ReconcileRunsc); a pid of
// runsc's state file is never signalled.
func (c *coordinator) recoverGenerations() {
	var gens []uint64
	c.store.View(func(tx *store.Tx) error {
		gs, err := tx.Generations()
		gens = gs
		return err
	})
	for _, g := range gens {
		// Every recorded process of g proven gone: this coordinator,
		// holding the Domain lock, recovers it.
		rec := c.sb.Recover(g, func() { c.lower.BootstrapRecovery(g) })
		if rec.Clean {
			// The sandbox's processes were proven absent when it became
			// Clean; a lease still held (a crash inside release) follows.
			var live bool
			c.store.View(func(tx *store.Tx) error { live = preparedlower.Live(tx, g); return nil })
			if live {
				c.lower.BootstrapRecovery(g)
				if refusals := c.lower.Recover(g); len(refusals) > 0 {
					c.retain(g, "prepared_lower", strings.Join(refusals, "; "))
					continue
				}
				c.lower.Recovered(g)
			}
			continue
		}
		if rec.Retained() {
			c.retain(g, "sandbox", rec.Reason())
			continue
		}
		if !c.recoverParticipants(g, rec.Absent) {
			continue
		}
		c.lower.Recovered(g)
		c.log.Info("recovered generation", "recovered_generation", g)
	}
}

// recoverParticipants reconciles the participants of dead generation g
// whose sandbox processes were proven absent (absent), one participant at
// a time in the order below, the sandbox's record last. The first that
// refuses is retained with its reason and the rest are left as they are
// (the next recovery starts over); it reports whether all became Clean.
func (c *coordinator) recoverParticipants(g uint64, absent []pidfs.Authority) bool {
	for _, p := range []struct {
		record  string
		recover func() error
	}{
		{"publication", func() error {
			return publication.Clean(c.store, g, "bootstrap recovery: the dead generation's coordinator and socket are gone")
		}},
		{"network", func() error { return refused(network.Recover(c.store, g, c.awaitAbsence)) }},
		{"session_terminal", func() error { return refused(c.recoverSessions(g)) }},
		{"git_routing", func() error {
			return gitrouting.Clean(c.store, g, "bootstrap recovery: the Git-routing daemon proven absent by PidfsRecoveryMatch; its mount died with the supervisor's mount namespace", c.awaitAbsence)
		}},
		{"prepared_lower", func() error { return refused(c.lower.Recover(g)) }},
		{"sandbox", func() error {
			return c.sb.MarkClean(g, "bootstrap recovery: recorded processes proven absent by PidfsRecoveryMatch", absent)
		}},
	} {
		if err := p.recover(); err != nil {
			c.retain(g, p.record, err.Error())
			return false
		}
	}
	return true
}

// refused is a role's recovery refusals as one error (nil if none).
func refused(refusals []string) error {
	if len(refusals) == 0 {
		return nil
	}
	return errors.New(strings.Join(refusals, "; "))
}

func (c *coordinator) retain(g uint64, record, reason string) {
	c.log.Warn("recovery retained a record", "recovered_generation", g, "record", record, "reason", reason)
	c.mu.Lock()
	c.retained = append(c.retained, retained{Generation: g, Record: record, Reason: reason})
	c.mu.Unlock()
}

// awaitAbsence proves the recorded process gone, stopping it through the
// exact matched pidfd if it outlives the bounded wait.
func (c *coordinator) awaitAbsence(id pidfs.Identity) error {
	h, err := pidfs.RecoveryMatch(id)
	switch {
	case errors.Is(err, pidfs.ErrAbsent), errors.Is(err, pidfs.ErrMismatch), errors.Is(err, pidfs.ErrBootFenced):
		return nil
	case err != nil:
		return err
	}
	defer h.Close()
	if id == c.self {
		return nil // this coordinator ends its own ownership
	}
	// Terminated, not reaped: a process that exited is gone even while its
	// (new) parent has not collected it yet.
	done, err := h.WaitTerminated(recoveryWait)
	if err != nil {
		return err
	}
	if !done {
		c.log.Warn("recovered process outlived lease-loss teardown: SIGKILL through its matched pidfd", "identity", id.String())
		h.Signal(unix.SIGKILL)
		if done, err = h.WaitTerminated(5 * time.Second); err != nil {
			return err
		}
		if !done {
			return fmt.Errorf("still alive after SIGKILL")
		}
	}
	return nil
}

// finishSandbox records the sandbox Clean after teardown: RS was reaped by
// this coordinator (exact absence), the attached runsc, its sandbox and
// gofer are matched absent (then runsc's state is removed), and this
// coordinator's ownership role ends with the record. Anything not
// proven stays in ReleaseIntent for the next bootstrap recovery.
func (c *coordinator) finishSandbox(rs *proc.Child) {
	absent, err := c.sb.Clean(rs)
	var runscRefused *sandbox.RunscRefusal
	if errors.As(err, &runscRefused) {
		c.log.Error("runsc sandbox or gofer absence not proven: sandbox stays in release intent", "err", strings.Join(runscRefused.Refusals, "; "))
		c.retain(c.generation, "sandbox", strings.Join(runscRefused.Refusals, "; "))
		return
	}
	if err != nil {
		c.log.Error("sandbox stays in release intent", "err", err)
		return
	}
	if err := gitrouting.Clean(c.store, c.generation, "normal teardown: the Git-routing daemon stopped and its mount removed by the reaped runtime supervisor", c.awaitAbsence); err != nil {
		c.log.Error("git_routing absence not proven: it stays in release intent", "err", err)
		return
	}
	if err := c.sb.MarkClean(c.generation, "normal teardown: runtime supervisor reaped, attached runsc absent", absent); err != nil {
		c.log.Error("record sandbox clean", "err", err)
		return
	}
	c.lower.SupervisorSlotCleared()
}

// terminalRecorder returns the Domain Store's Session Terminal recorder.
// The store is open before the control socket accepts a session (init
// fails without it).
func (c *coordinator) terminalRecorder() sessionterm.Recorder {
	return sessionterm.StoreRecorder{Store: c.store, Generation: c.generation, Coordinator: c.self}
}

// recoverSessions reconciles a dead generation's Session Terminals
// (sessionterm.Recover): exec clients proven absent, records Clean.
func (c *coordinator) recoverSessions(g uint64) []string {
	return sessionterm.Recover(c.store, g, c.awaitAbsence)
}

// recoverStaleRuntime removes what a dead generation left in the runtime
// directory, after recoverGenerations. The Domain lock (held by us, and by
// a Runtime Supervisor until it exits) proves no other coordinator or
// supervisor of this Domain lives. runsc state is removed only for a
// container whose generation's sandbox is Clean (its processes were proven
// gone) or, with no record at all, once its pids are free
// (sandbox.ReconcileRunsc); a retained generation's state is kept. No runsc
// command runs: `runsc delete` would SIGKILL the state file's pids.
func (c *coordinator) recoverStaleRuntime() {
	c.sb.RecoverStaleState(c.isRetained, func(g uint64, reason string) { c.retain(g, "runsc_state", reason) })
	// The helper's API socket of a killed generation stays behind (only
	// a helper that exits normally unlinks it) and would make the next
	// helper's bind fail.
	for _, d := range []string{c.paths.BundleDir(), c.paths.ControlMountSource(), c.sessionDir(), network.APISocket(c.paths.RuntimeDir)} {
		os.RemoveAll(d)
	}
	c.sb.RemoveRunscRootIfEmpty()
}
