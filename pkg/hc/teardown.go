package hc

// The generation's teardown: one declared list of steps (teardownSteps)
// that the coordinator walks in order (walkTeardown), like recovery's
// ordered list of participants (recoverParticipants).
//
// Its order of durable store transitions is not the reverse of start-up:
// every participant's release intent is recorded first, while the runtime
// still runs — publication, sandbox, prepared lower and State Anchors,
// network (and its connectivity helper), Git routing, in one transaction —
// so that a crash
// from there on leaves each record in release for bootstrap recovery; then
// RS is stopped and reaped, and the cleans, each with its absence proof,
// follow in the order network, prepared lower, then Git routing and the
// sandbox together (the sandbox record last: its Clean ends this
// coordinator's ownership). TestTeardownOrder pins both orders; each step
// is logged (debug) with the records it declares, and the integration
// scenario TestSpec32TeardownRecordsDeclaredTransitions checks them against
// the phase changes a real generation's Domain Store logs as it commits
// them.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/store"
)

// teardownStep is one step of the generation's teardown.
type teardownStep struct {
	name string
	// records names the durable store transitions the step records, in
	// order ("" when it records none).
	records []string
	// store: the step uses the Domain Store and is skipped without one.
	store bool
	run   func()
}

// teardownSteps is the generation's teardown, in the order walked;
// sessions are the sessions registered when it began, rs the Runtime
// Supervisor's child (nil when its acquisition failed).
func (c *coordinator) teardownSteps(sessions []*session, rs *proc.Child) []teardownStep {
	return []teardownStep{
		{name: "let the starting CLI hear the failure", run: c.awaitStartFailureHeard},
		// Withdraw publication before dropping keys.
		{name: "withdraw publication", run: func() {
			if c.pub != nil {
				c.pub.Withdraw()
			}
		}},
		{name: "end sessions", run: func() {
			for _, s := range sessions {
				s.kill()
			}
			// Let sessions deliver their last frame (exit status or error).
			select {
			case <-c.sessions.Drained():
			case <-time.After(drainTimeout + closeGrace):
			}
			c.first.close()
		}},
		// No lease or anchor acquisition step after this point: the
		// generation is released from here on (the model's BeginRelease).
		{name: "begin release", run: func() {
			if c.lower != nil {
				c.lower.BeginRelease()
			}
		}},

		// Release intents, while the runtime still runs: one transaction,
		// each participant's in this order (one durable write instead of
		// five on the way to the Domain lock's release, which a following
		// start of the Domain waits for).
		{name: "release intents", store: true, records: []string{"publication ReleaseIntent", "publication Clean", "sandbox ReleaseIntent", "state_anchor ReleaseIntent", "network ReleaseIntent", "helper ReleaseIntent", "git_routing ReleaseIntent"}, run: c.recordReleaseIntents},

		// The runtime ends: RS (which stops the sandbox, the Git-routing
		// daemon and unmounts), the helper, host processes, keys.
		{name: "stop runtime supervisor", run: func() { c.stopSupervisor(rs) }},
		{name: "stop connectivity helper", run: c.net.Stop},
		{name: "close escalation", run: c.esc.Close}, // every host process of the generation killed and reaped
		{name: "close supervisor channel", run: c.rs.Close},
		{name: "destroy trust anchor", run: func() {
			if c.anchor != nil {
				c.anchor.Destroy()
			}
		}},

		// Cleans, each with its absence proof.
		{name: "clean network", store: true, records: []string{"network Clean", "helper Clean"}, run: func() { c.net.Finish(rs) }},
		{name: "clean prepared lower", store: true, records: []string{"state_anchor Clean", "prepared_lower ReleaseIntent", "prepared_lower Clean"}, run: func() { c.lower.Clean(rs) }},
		{name: "clean git routing and sandbox", store: true, records: []string{"git_routing Clean", "sandbox Clean"}, run: func() { c.finishSandbox(rs) }},
		{name: "close store", store: true, run: func() {
			if err := c.store.Close(); err != nil {
				c.log.Error("close the Domain Store", "err", err)
			}
		}},

		// After finishSandbox: it removes runsc state only once its
		// processes are proven gone.
		{name: "remove runtime files", run: c.cleanupRuntime},
		{name: "end sticky paths", run: c.routing.EndSticky},
		{name: "finish generation", run: func() {
			c.mtFinish()
			if c.lower != nil {
				c.lower.Finish()
			}
		}},
	}
}

// recordReleaseIntents records, in one Domain Store transaction, the
// publication's release (it was withdrawn: file removed, listener closed)
// and the release intents of the sandbox, the State Anchors, the network
// and its helper, and Git routing, in that order. Once the intents are
// durable the helper may begin to stop: it serves only the sandbox, whose
// sessions have ended, and its process's end in the kernel then overlaps
// RS's stop (the "stop connectivity helper" step waits for it). A failed
// transaction records none of them; the teardown goes on and the next
// start's recovery finds them as they were.
func (c *coordinator) recordReleaseIntents() {
	anchorReleased := false
	err := c.store.Update(func(tx *store.Tx) error {
		if err := c.pub.ReleaseTx(tx, "teardown: publication file removed, listener closed"); err != nil {
			return fmt.Errorf("publication: %w", err)
		}
		if err := c.sb.ReleaseTx(tx); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
		var err error
		if anchorReleased, err = c.lower.ReleaseTx(tx); err != nil {
			return fmt.Errorf("state anchor: %w", err)
		}
		if err := c.net.ReleaseTx(tx); err != nil {
			return fmt.Errorf("network: %w", err)
		}
		if err := c.routing.ReleaseTx(tx); err != nil {
			return fmt.Errorf("git routing: %w", err)
		}
		return nil
	})
	if err != nil {
		c.log.Error("record the release intents", "err", err)
	}
	c.lower.ReleaseRecorded(anchorReleased && err == nil)
	c.net.BeginStop()
}

// walkTeardown runs steps in order; without a Domain Store the steps that
// use it are skipped.
func (c *coordinator) walkTeardown(steps []teardownStep) {
	for _, s := range steps {
		if s.store && c.store == nil {
			continue
		}
		c.log.Debug("teardown", "step", s.name, "records", strings.Join(s.records, ","))
		s.run()
	}
}

// stopSupervisor stops and reaps RS (package supervisor) and records its
// end in the model trace.
func (c *coordinator) stopSupervisor(rs *proc.Child) {
	if rs != nil {
		c.rs.Stop(context.Background())
		if modeltrace.On() {
			// SupervisorStopped is read by superviseMessages, which may
			// lag behind the exit.
			stopped := c.rs.AwaitStopped(time.Second)
			st, _ := rs.Status()
			c.mtSupervisorGone(st, stopped, c.rs.Killed())
			c.lower.SupervisorGone(stopped)
		}
	} else if modeltrace.On() {
		// Staged by the broker, whose acquisition then failed: the broker
		// stopped it before anything of it was used.
		if c.lower != nil {
			c.lower.SupervisorStoppedUnused()
		}
	}
	failpoint.Hit("lazaret-hc:rs-stopped")
}

// awaitStartFailureHeard keeps the control socket, for at most
// startFailureGrace, when the generation failed before its publication and
// before any session arrived: the CLI that started this coordinator dials
// it once the coordinator reported ready, and a failure that comes first
// (e.g. the Git Sentry refusing the workspace while the CLI is still
// descheduled on a loaded machine) would otherwise leave that CLI only "the
// Host Coordinator exited during start-up", without the cause. It returns
// once a session request was refused with the failure.
func (c *coordinator) awaitStartFailureHeard() {
	c.mu.Lock()
	wait := c.startFailed && c.sessions.Idle()
	c.mu.Unlock()
	if !wait {
		return
	}
	select {
	case <-c.failureHeard:
	case <-time.After(startFailureGrace):
		c.log.Warn("no CLI heard the start-up failure", "grace", startFailureGrace)
	}
}
