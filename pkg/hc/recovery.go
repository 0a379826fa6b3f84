package hc

// Bootstrap recovery (FR-7): the coordinator that holds the Domain lock
// reconciles every earlier generation's records, one participant at a time
// in one ordered list (recoverParticipants), and keeps what it refused to
// act on (recovery).

import (
	"errors"
	"os"
	"strings"
	"sync"

	"github.com/lazaret/lazaret/pkg/hc/gitrouting"
	"github.com/lazaret/lazaret/pkg/hc/network"
	"github.com/lazaret/lazaret/pkg/hc/preparedlower"
	"github.com/lazaret/lazaret/pkg/hc/publication"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

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
//
// Only the generations after the Domain's recovery watermark are examined
// (store.Tx.SettledThrough): settled generations never change, and a Domain
// started thousands of times would otherwise pay for every one of them on
// each start. recoverGenerations returns the new watermark: the last of
// the generations after the old one that were all found settled here, in
// a row from it (sandbox record Clean, no lease held); beginGeneration
// records it with the new generation.
func (c *coordinator) recoverGenerations() (settled uint64, err error) {
	var gens []uint64
	if err := c.store.View(func(tx *store.Tx) error {
		through, err := tx.SettledThrough()
		if err != nil {
			return err
		}
		settled = through
		gens, err = tx.GenerationsAfter(through)
		return err
	}); err != nil {
		return 0, err
	}
	inRow := true // every generation so far was found settled
	for _, g := range gens {
		// Every recorded process of g proven gone: this coordinator,
		// holding the Domain lock, recovers it.
		rec := c.sb.Recover(g, func() { c.lower.BootstrapRecovery(g) })
		if rec.Clean {
			// The sandbox's processes were proven absent when it became
			// Clean; a lease still held (a crash inside release) follows.
			var live bool
			c.store.View(func(tx *store.Tx) error { live = preparedlower.Live(tx, g); return nil })
			if !live {
				if inRow {
					settled = g
				}
				continue
			}
			inRow = false // settled by the next start's recovery
			c.lower.BootstrapRecovery(g)
			if refusals := c.lower.Recover(g); len(refusals) > 0 {
				c.retain(g, "prepared_lower", strings.Join(refusals, "; "))
				continue
			}
			c.lower.Recovered(g)
			continue
		}
		inRow = false
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
	c.log.Info("bootstrap recovery", "examined", len(gens), "settled_through", settled)
	return settled, nil
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

// retain records that recovery (or a teardown that could not prove a
// record's processes gone) left record of generation g as it was.
func (c *coordinator) retain(g uint64, record, reason string) {
	c.log.Warn("recovery retained a record", "recovered_generation", g, "record", record, "reason", reason)
	c.recovery.add(retained{Generation: g, Record: record, Reason: reason})
}

// recovery is bootstrap recovery's outcome: the records it refused to act
// on, with the reason (`lazaret status` lists them). Its own lock guards
// the list.
type recovery struct {
	mu       sync.Mutex
	retained []retained
}

func (r *recovery) add(x retained) {
	r.mu.Lock()
	r.retained = append(r.retained, x)
	r.mu.Unlock()
}

// isRetained reports whether a record of generation g was retained.
func (r *recovery) isRetained(g uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.retained {
		if x.Generation == g {
			return true
		}
	}
	return false
}

// records are the retained records, in the order they were retained.
func (r *recovery) records() []retained {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]retained(nil), r.retained...)
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
	c.sb.RecoverStaleState(c.recovery.isRetained, func(g uint64, reason string) { c.retain(g, "runsc_state", reason) })
	// The helper's API socket of a killed generation stays behind (only
	// a helper that exits normally unlinks it) and would make the next
	// helper's bind fail.
	for _, d := range []string{c.paths.BundleDir(), c.paths.ControlMountSource(), c.sessionDir(), network.APISocket(c.paths.RuntimeDir)} {
		os.RemoveAll(d)
	}
	c.sb.RemoveRunscRootIfEmpty()
}
