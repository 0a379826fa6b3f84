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
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/gitrouting"
	"github.com/lazaret/lazaret/pkg/hc/preparedlower"
	"github.com/lazaret/lazaret/pkg/hc/sandbox"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/shellquote"
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
	st, err := store.Open(c.paths.DomainRoot, c.lockFile, store.DomainIdentity{ID: c.paths.ID, Profile: c.cfg.profileName, CanonicalWorkspace: c.cfg.workspace}, store.Options{Logger: c.log})
	if errors.Is(err, errdefs.ErrCorrupt) {
		// Without its records the coordinator cannot tell what an earlier
		// generation left mounted, leased or running, so it starts nothing;
		// the way on is the Domain's removal, which proves nothing of it
		// runs before it deletes.
		return fmt.Errorf("%w: this Domain's records cannot be read, so it is not started (what an earlier run left could not be told); copy %s aside if you want to inspect it, then `lazaret rm -p %s -C %s` removes the Domain's state (State Anchors, Ignored Workspace State, store and log; not your workspace) and the next run starts afresh",
			err, c.paths.DomainRoot, c.cfg.profileName, shellquote.Word(c.cfg.workspace))
	}
	if err != nil {
		return err
	}
	c.store = st
	c.lower = preparedlower.New(preparedlower.Config{
		Log: c.log, Store: c.store, Domain: c.paths.ID, StorageRoot: c.paths.StorageRoot,
		Image: c.cfg.image, PersistentPaths: c.cfg.profile.PersistentPaths, Coordinator: c.self,
		Supervisor: func() pidfs.Identity { return c.rs.Identity() },
		Send:       func(ctx context.Context, m *lv1.CoordinatorMessage) error { return c.rs.Send(ctx, m) },
		Mark:       c.timing.Mark,
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
// bare Intent — durable intent before any external resource of it exists —
// and raises the recovery watermark to settled (recoverGenerations) in the
// same synced batch.
func (c *coordinator) beginGeneration(sandboxID, sidecarID string, settled uint64) error {
	defer func() { c.lower.Begin(c.generation) }()
	return c.store.Update(func(tx *store.Tx) error {
		last, err := tx.LatestGeneration()
		if err != nil {
			return err
		}
		c.generation = last + 1
		if err := tx.CreateGeneration(store.NewGeneration{
			Number: c.generation, ConfigurationFingerprint: []byte(c.cfg.profile.Fingerprint()), CoordinatorID: c.cfg.coordinatorID,
			ComponentIDs: []store.ComponentID{{Kind: "agent_sandbox", ID: sandboxID}, {Kind: "network_sidecar", ID: sidecarID}}, Coordinator: c.self,
		}); err != nil {
			return err
		}
		if err := sandbox.PutIntent(tx, c.generation); err != nil {
			return err
		}
		return tx.SetSettledThrough(settled)
	})
}

// awaitAbsence proves the recorded process gone, stopping it through the
// exact matched pidfd if it outlives the bounded wait.
func (c *coordinator) awaitAbsence(id pidfs.Identity) error {
	h, err := pidfs.RecoveryLive(id)
	if h == nil || err != nil {
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
