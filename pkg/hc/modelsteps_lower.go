package hc

// Model-trace emission of the PreparedLower steps (tla/PreparedLower.tla)
// the Host Coordinator takes: the supervisor's slot, the lease and anchor
// acquisition of lease.go, publication, release, and bootstrap recovery of
// a dead generation. plSteps is what this coordinator recorded of its own
// generation; it decides which model action a code path refines (a
// supervisor gone without having reported its anchors unmounted is the
// model's supervisor loss, after which the release is recovery). Fields
// are guarded by c.mu; every method is a no-op when recording is off.

import (
	"slices"

	"github.com/lazaret/lazaret/pkg/catalog"
	"github.com/lazaret/lazaret/pkg/modeltrace"
)

type plPhase int

const (
	plStarting plPhase = iota
	plReady
	plStopping
	plRecovering
	plDone
)

type plSteps struct {
	phase    plPhase
	artifact string   // the artifact the lease names (AcquireLeaseIntent)
	rs       bool     // SpawnSupervisor recorded, RS not yet gone
	slot     bool     // RS's slot staged or committed, not yet cleared
	lower    bool     // prepared_lower recorded and not yet Clean
	anchor   bool     // state_anchor recorded and not yet Clean
	mounts   []uint64 // the anchor mounts RS reported (AnchorsMounted)
	// releasing: teardown began; lease and anchor acquisition refuse
	// from then on (guarded by c.leaseMu, not c.mu).
	releasing bool
}

// plEmit records action for this generation (c.mu held).
func (c *coordinator) plEmit(action string) {
	modeltrace.EmitGeneration(c.dom(), c.generation, c.pl.artifact, action)
}

// plGen records action for generation gen (bootstrap recovery, release).
func (c *coordinator) plGen(gen uint64, artifact, action string, reconcile bool) {
	if reconcile {
		modeltrace.EmitGenerationReconcile(c.dom(), gen, artifact, action)
		return
	}
	modeltrace.EmitGeneration(c.dom(), gen, artifact, action)
}

// plStep records, for this generation, actions under c.mu after update
// adjusted plSteps.
func (c *coordinator) plStep(update func(*plSteps), actions ...string) {
	if !modeltrace.On() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if update != nil {
		update(&c.pl)
	}
	for _, a := range actions {
		c.plEmit(a)
	}
}

// plBeginReleaseLocked records BeginRelease when teardown begins releasing
// (c.mu held): a starting generation is abandoned, a published one
// released.
func (c *coordinator) plBeginReleaseLocked() {
	if modeltrace.On() && (c.pl.phase == plStarting || c.pl.phase == plReady) {
		c.plEmit("BeginRelease")
		c.pl.phase = plStopping
	}
}

// plPublishLocked records PublishGeneration with PublishDomain (c.mu held).
func (c *coordinator) plPublishLocked() {
	if modeltrace.On() && c.pl.phase == plStarting {
		c.plEmit("PublishGeneration")
		c.pl.phase = plReady
	}
}

// plSupervisorGone records how RS's end appears in PreparedLower: in a
// release, a supervisor that reported every anchor mount it created
// unmounted (SupervisorStopped) was stopped by this coordinator
// (StopSupervisor); any other end — a crash, a SIGKILL, an exit after a
// failure that left its mounts to the death of its mount namespace — is
// the model's supervisor loss, from which this coordinator recovers.
func (c *coordinator) plSupervisorGone(stopped bool) {
	if !modeltrace.On() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pl.rs {
		return
	}
	c.pl.rs = false
	unmounted := true
	for _, id := range c.pl.mounts {
		if !slices.Contains(c.anchorsUnmounted, id) {
			unmounted = false
		}
	}
	if c.pl.phase == plStopping && stopped && unmounted {
		c.plEmit("StopSupervisor")
		return
	}
	c.plEmit("HardLoseSupervisor")
	c.plEmit("BeginRecovery")
	c.pl.phase = plRecovering
}

// plRecovering reports whether this generation's release is recovery.
func (c *coordinator) plRecovering() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pl.phase == plRecovering
}

// plFinish records FinishGeneration once every participant of the
// generation was released and RS's slot cleared.
func (c *coordinator) plFinish() {
	if !modeltrace.On() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &c.pl
	if (p.phase == plStopping || p.phase == plRecovering) && !p.rs && !p.slot && !p.lower && !p.anchor {
		c.plEmit("FinishGeneration")
		p.phase = plDone
	}
}

// plBootstrap records that this coordinator, holding the Domain lock,
// recovers dead generation gen (a reconcile step: it continues a recovery
// its predecessor began, or follows a loss the replay infers).
func (c *coordinator) plBootstrap(gen uint64) {
	if modeltrace.On() {
		c.plGen(gen, "", "BootstrapRecoveryCoordinator", true)
	}
}

// plRecovered records the end of bootstrap recovery of generation gen:
// its supervisor's slot cleared with the sandbox record (a reconcile
// step: a generation that failed before staging its supervisor had none)
// and the generation finished.
func (c *coordinator) plRecovered(gen uint64) {
	if modeltrace.On() {
		c.plGen(gen, "", "ClearSupervisorSlot", true)
		c.plGen(gen, "", "FinishGeneration", false)
	}
}

// plArtifact records how RecoverReclaim settled an interrupted
// reclamation of artifact id before this generation leases it (inside
// the catalog transaction): completed (ReclaimArtifact) or rolled back,
// its tree never having left (RollbackReclaim).
func (c *coordinator) plArtifact(out catalog.ReclaimOutcome, id string) {
	switch out {
	case catalog.Completed:
		modeltrace.EmitArtifact(c.dom(), c.generation, "ReclaimArtifact", id)
	case catalog.RolledBack:
		modeltrace.EmitArtifact(c.dom(), c.generation, "RollbackReclaim", id)
	}
}
