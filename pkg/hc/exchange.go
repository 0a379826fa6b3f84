package hc

// The HC side of the HC↔RS channel: one typed phase machine that states
// which Runtime Supervisor message each phase of a generation's start-up
// and run accepts, and the phase it leads to. The table follows RS's send
// order (pkg/rs: run, launch, serve) including its fault paths:
//
//	hello     SupervisorHello → lower (HC answers StartSandbox)
//	lower     ArtifactReady → anchors (HC records the lease, LeaseRecorded)
//	anchors   AnchorsMounted → staging
//	staging   Staged (git_routing, egress_proxy, attached_runsc), then
//	          SandboxReady → running (committed and published)
//	running   SupervisorStopped → done
//	failed    after SupervisorFailure: RS tears down; SupervisorStopped → done
//
// Progress arrives in any phase after the hello (image preparation, State
// Anchor notices). A Git-routing Staged report is accepted in any order
// relative to the lease and anchor reports (RS has started the daemon
// concurrently with them); ArtifactReady's lease records run beside the
// exchange, so the daemon's report is not held behind them. NetworkAsk
// comes from the egress proxy, which listens before the attached runsc is
// staged. SupervisorFailure is accepted in every phase: before the hello it
// ends the generation, later RS exits (before SandboxReady) or sends
// SupervisorStopped after its teardown (from serve). Any other message is
// a protocol error: the generation fails (ErrCorrupt) naming the phase and
// the message.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// supervisorPhase is where a generation's HC↔RS exchange stands.
type supervisorPhase int

const (
	// phaseHello awaits RS's first message, SupervisorHello.
	phaseHello supervisorPhase = iota
	// phaseLower: StartSandbox sent; awaits ArtifactReady.
	phaseLower
	// phaseAnchors: the prepared-lower lease is recorded; awaits
	// AnchorsMounted.
	phaseAnchors
	// phaseStaging: the anchors are recorded; RS stages its children and
	// reports SandboxReady.
	phaseStaging
	// phaseRunning: the sandbox is committed and the Domain published.
	phaseRunning
	// phaseFailed: RS reported a failure and tears down.
	phaseFailed
	// phaseDone: the exchange is over (SupervisorStopped, or a failure
	// before the hello); nothing more is read.
	phaseDone
)

func (p supervisorPhase) String() string {
	switch p {
	case phaseHello:
		return "hello"
	case phaseLower:
		return "lower"
	case phaseAnchors:
		return "anchors"
	case phaseStaging:
		return "staging"
	case phaseRunning:
		return "running"
	case phaseFailed:
		return "failed"
	case phaseDone:
		return "done"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// supervisorKind is the kind of one RS→HC message; a Staged report's kind
// includes its slot.
type supervisorKind int

const (
	kindUnknown supervisorKind = iota
	kindHello
	kindProgress
	kindArtifact
	kindAnchorsMounted
	kindStagedRouting
	kindStagedEgress
	kindStagedRunsc // attached_runsc, or a slot commitStaged refuses
	kindNetworkAsk
	kindReady
	kindFailure
	kindStopped
	numSupervisorKinds
)

func (k supervisorKind) String() string {
	switch k {
	case kindHello:
		return "SupervisorHello"
	case kindProgress:
		return "Progress"
	case kindArtifact:
		return "ArtifactReady"
	case kindAnchorsMounted:
		return "AnchorsMounted"
	case kindStagedRouting:
		return "StagedProcessOwnership(git_routing)"
	case kindStagedEgress:
		return "StagedProcessOwnership(egress_proxy)"
	case kindStagedRunsc:
		return "StagedProcessOwnership(attached_runsc)"
	case kindNetworkAsk:
		return "NetworkAsk"
	case kindReady:
		return "SandboxReady"
	case kindFailure:
		return "SupervisorFailure"
	case kindStopped:
		return "SupervisorStopped"
	}
	return "an unknown message"
}

// supervisorMessageKind classifies m.
func supervisorMessageKind(m *lv1.SupervisorMessage) supervisorKind {
	switch m.GetMsg().(type) {
	case *lv1.SupervisorMessage_Hello:
		return kindHello
	case *lv1.SupervisorMessage_Progress:
		return kindProgress
	case *lv1.SupervisorMessage_Artifact:
		return kindArtifact
	case *lv1.SupervisorMessage_AnchorsMounted:
		return kindAnchorsMounted
	case *lv1.SupervisorMessage_Staged:
		switch m.GetStaged().GetSlot() {
		case "git_routing":
			return kindStagedRouting
		case "egress_proxy":
			return kindStagedEgress
		}
		return kindStagedRunsc
	case *lv1.SupervisorMessage_NetworkAsk:
		return kindNetworkAsk
	case *lv1.SupervisorMessage_Ready:
		return kindReady
	case *lv1.SupervisorMessage_Failure:
		return kindFailure
	case *lv1.SupervisorMessage_Stopped:
		return kindStopped
	}
	return kindUnknown
}

// supervisorProtocol states, for each phase, the message kinds it accepts
// and the phase each leads to. A kind absent from a phase's row is refused.
var supervisorProtocol = map[supervisorPhase]map[supervisorKind]supervisorPhase{
	phaseHello: {
		kindHello:   phaseLower,
		kindFailure: phaseDone,
	},
	phaseLower: {
		kindProgress:      phaseLower,
		kindStagedRouting: phaseLower,
		kindArtifact:      phaseAnchors,
		kindFailure:       phaseFailed,
	},
	phaseAnchors: {
		kindProgress:       phaseAnchors,
		kindStagedRouting:  phaseAnchors,
		kindAnchorsMounted: phaseStaging,
		kindFailure:        phaseFailed,
	},
	phaseStaging: {
		kindProgress:      phaseStaging,
		kindStagedRouting: phaseStaging,
		kindStagedEgress:  phaseStaging,
		kindStagedRunsc:   phaseStaging,
		kindNetworkAsk:    phaseStaging,
		kindReady:         phaseRunning,
		kindFailure:       phaseFailed,
	},
	phaseRunning: {
		kindProgress:   phaseRunning,
		kindNetworkAsk: phaseRunning,
		kindFailure:    phaseFailed,
		kindStopped:    phaseDone,
	},
	phaseFailed: {
		kindProgress:   phaseFailed,
		kindNetworkAsk: phaseFailed,
		kindFailure:    phaseFailed,
		kindStopped:    phaseDone,
	},
	phaseDone: {},
}

// nextSupervisorPhase is the phase after a message of kind k in phase p,
// or a protocol error (ErrCorrupt) when p does not accept k.
func nextSupervisorPhase(p supervisorPhase, k supervisorKind) (supervisorPhase, error) {
	if next, ok := supervisorProtocol[p][k]; ok {
		return next, nil
	}
	var accepted []string
	for kind := kindUnknown; kind < numSupervisorKinds; kind++ {
		if _, ok := supervisorProtocol[p][kind]; ok {
			accepted = append(accepted, kind.String())
		}
	}
	return p, errdefs.New(errdefs.ErrCorrupt, "runtime supervisor protocol error: %s in phase %s (accepted: %s)", k, p, strings.Join(accepted, ", "))
}

// superviseMessages runs the generation's side of the HC↔RS exchange: it
// reads RS's messages, refuses any its phase does not accept, and handles
// the rest. Any error fails the generation.
func (c *coordinator) superviseMessages(prepared <-chan error) {
	if c.exchangeDone != nil {
		defer close(c.exchangeDone)
	}
	var (
		hello       *lv1.SupervisorHello
		provisional bool // a provisional ArtifactReady was read
	)
	for phase := phaseHello; phase != phaseDone; {
		var m lv1.SupervisorMessage
		if phase == phaseHello {
			ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
			err := c.rs.Recv(ctx, &m)
			cancel()
			if err != nil {
				if !c.supervisorExited() {
					c.setState(stateFailed, fmt.Errorf("runtime supervisor hello: %w", err))
				}
				return
			}
		} else if err := c.rs.Recv(context.Background(), &m); err != nil {
			c.mu.Lock()
			stopping := c.st == stateStopping
			c.mu.Unlock()
			if !stopping && !c.supervisorExited() {
				c.setState(stateFailed, fmt.Errorf("runtime supervisor channel: %w", err))
			}
			return
		}
		kind := supervisorMessageKind(&m)
		next, err := nextSupervisorPhase(phase, kind)
		if err == nil && kind == kindArtifact {
			a := m.GetArtifact()
			var lease bool
			if lease, err = c.leaseArtifact(a, provisional); err != nil {
				c.setState(stateFailed, err)
				return
			}
			provisional = provisional || a.GetProvisional()
			if !lease {
				continue // RS names the artifact it resolves next
			}
			// The lease records (a Storage Catalog transaction, tens of
			// milliseconds) run beside the exchange: the Git-routing
			// daemon's Staged report, sent right after ArtifactReady,
			// is acknowledged meanwhile instead of after them. RS sends
			// the next report of this phase (AnchorsMounted) only after
			// LeaseRecorded, which the role sends last.
			go func() {
				if err := c.lower.Acquire(context.Background(), a, hello); err != nil {
					c.setState(stateFailed, err)
				}
			}()
			phase = next
			continue
		}
		if err == nil {
			err = c.supervisorMessage(&m, &hello, prepared)
		}
		if err != nil {
			c.setState(stateFailed, err)
			return
		}
		phase = next
	}
}

// leaseArtifact decides whether ArtifactReady a is leased: always, unless
// it is provisional (RS found the tree without the preparer before reading
// StartSandbox) and the Storage Catalog's verdict this coordinator sent RS
// (reusableLower) does not name it; RS then prepares and names the
// artifact it holds, which is leased. Only the first ArtifactReady may be
// provisional (provisionalRead: one was read).
func (c *coordinator) leaseArtifact(a *lv1.ArtifactReady, provisionalRead bool) (bool, error) {
	if !a.GetProvisional() {
		return true, nil
	}
	if provisionalRead {
		return false, errdefs.New(errdefs.ErrCorrupt, "runtime supervisor protocol error: a second provisional ArtifactReady (%s)", a.GetPreparedArtifactId())
	}
	if verdict := c.reusableLower(); a.GetPreparedArtifactId() != verdict {
		c.log.Info("the runtime supervisor found a prepared lower the Storage Catalog does not record Published for the image: not leasing it; it runs the preparer",
			"artifact_id", a.GetPreparedArtifactId(), "reusable_artifact_id", verdict)
		return false, nil
	}
	return true, nil
}

// supervisorExited reports whether the channel ended because RS exited
// (waiting a moment for its exit to show): its exit is then reported as
// such (failOnExitAfter), after every message it sent was read.
func (c *coordinator) supervisorExited() bool {
	child := c.rs.Child()
	if child == nil {
		return false
	}
	select {
	case <-child.Done():
		return true
	case <-time.After(exitReportWait):
		return false
	}
}

// supervisorMessage handles one message its phase accepts; hello is the
// generation's verified SupervisorHello, set by the first message.
func (c *coordinator) supervisorMessage(m *lv1.SupervisorMessage, hello **lv1.SupervisorHello, prepared <-chan error) error {
	switch m.GetMsg().(type) {
	case *lv1.SupervisorMessage_Hello:
		*hello = m.GetHello()
		return c.supervisorHello(*hello, prepared)
	case *lv1.SupervisorMessage_Progress:
		c.addProgress(m.GetProgress().GetMessage())
	case *lv1.SupervisorMessage_Artifact, *lv1.SupervisorMessage_AnchorsMounted:
		return c.lower.SupervisorMessage(context.Background(), m, *hello)
	case *lv1.SupervisorMessage_NetworkAsk:
		go c.decideNetworkAsk(m.GetNetworkAsk())
	case *lv1.SupervisorMessage_Staged:
		return c.commitStaged(m.GetStaged())
	case *lv1.SupervisorMessage_Ready:
		return c.supervisorReady(m)
	case *lv1.SupervisorMessage_Failure:
		f := m.GetFailure()
		c.setState(stateFailed, errdefs.Mark(errors.New(f.Message), errdefs.FromCategory(f.Category)))
	case *lv1.SupervisorMessage_Stopped:
		if err := c.lower.SupervisorMessage(context.Background(), m, *hello); err != nil {
			return err
		}
		c.rs.ReportStopped()
	}
	return nil
}

// supervisorHello verifies RS's hello once the network is prepared and
// answers it with StartSandbox.
func (c *coordinator) supervisorHello(hello *lv1.SupervisorHello, prepared <-chan error) error {
	if err := <-prepared; err != nil {
		return err
	}
	c.log.Info("runtime supervisor hello verified")
	c.timing.Mark("runtime supervisor hello verified")
	start, err := c.sandboxStart(hello)
	if err != nil {
		return err
	}
	failpoint.Hit("lazaret-hc:hello-verified")
	c.timing.Mark("StartSandbox built")
	if err := c.rs.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Start{Start: start}}); err != nil {
		return err
	}
	announced := make(chan struct{})
	c.mu.Lock()
	c.helperAnnounced = announced
	c.mu.Unlock()
	go c.announceHelper(announced)
	return nil
}

// announceHelper tells RS, once the connectivity helper has configured
// its tap, that it may install the policy's routes (while the lease, the
// State Anchors and the Git routing are still in progress, instead of
// after runsc's staging); then closes announced. A helper that failed is
// reported by attachRunsc, which refuses runsc's acknowledgement.
func (c *coordinator) announceHelper(announced chan struct{}) {
	defer close(announced)
	if c.net.HelperReady() != nil {
		return
	}
	if err := c.rs.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_HelperReady{HelperReady: &lv1.ConnectivityHelperReady{}}}); err != nil {
		c.log.Warn("telling the runtime supervisor the connectivity helper is ready", "err", err)
	}
}

// supervisorReady verifies SandboxReady against what was staged and
// derived, commits the sandbox and publishes the Domain.
func (c *coordinator) supervisorReady(m *lv1.SupervisorMessage) error {
	if err := c.sb.SupervisorMessage(context.Background(), m); err != nil {
		return err
	}
	r := m.GetReady()
	// The supervisor's evidence — the routes it observed — must
	// enforce the policy this coordinator derived, whatever it echoes.
	if err := c.net.VerifyReady(r); err != nil {
		return err
	}
	c.timing.Mark("sandbox ready")
	c.sandboxUpOnce.Do(func() { close(c.sandboxUp) })
	c.log.Info("sandbox ready", "prepared_artifact", r.PreparedArtifactId, "manifest", r.ManifestDigest, "routes", strings.Join(netpolicy.DisplayRoutes(r.ObservedRoutes), "; "))
	if err := c.net.ReadyEgress(r); err != nil {
		return err
	}
	if err := c.net.Judge(r); err != nil {
		return err
	}
	// Step 9 and the publication, in one transaction (one durable write
	// on the start's critical path instead of seven): the Git-routing
	// daemon Prepared, the exact staged RS and attached runsc ownership
	// committed with the container, the helper and the network (with the
	// probe's evidence) committed after it, then the publication, each
	// refused by the store out of that order. A refusal records none of
	// them; nothing is observable before the commit.
	if err := c.store.Update(func(tx *store.Tx) error {
		if err := c.routing.Ready(tx, r); err != nil {
			return err
		}
		if err := c.sb.Commit(tx, r); err != nil {
			return err
		}
		if err := c.net.Commit(tx, r, c.rs.Identity()); err != nil {
			return err
		}
		return c.pub.Commit(tx)
	}); err != nil {
		return err
	}
	failpoint.Hit("lazaret-hc:publication-committed")
	// The running sandbox holds the credential mount: unlink the
	// key's source and forget it (spec §3.2).
	os.Remove(filepath.Join(c.credentialDir(), sandboxKeyFile))
	c.anchor.DropSandboxKey()
	c.setState(stateRunning, nil)
	c.timing.Mark("Domain published")
	failpoint.Hit("lazaret-hc:published")
	return nil
}

// commitStaged validates RS's StagedProcessOwnership and acknowledges it
// with an exact echo (CausalChildAcquisitionV1 step 6).
func (c *coordinator) commitStaged(s *lv1.StagedProcessOwnership) error {
	if err := c.rs.VerifyStaged(s); err != nil {
		return err
	}
	if s.DomainId == string(c.paths.ID) && s.Generation == c.generation && s.CoordinatorId == c.cfg.coordinatorID && s.Slot == "git_routing" && c.routing.Wanted() {
		boot, err := pidfs.CurrentBootID()
		if err != nil {
			return err
		}
		if s.Identity == nil || string(s.Identity.BootId) != string(boot[:]) {
			return errdefs.New(errdefs.ErrRefused, "staged git_routing identity is not of this boot")
		}
		return c.routing.CommitStaged(s)
	}
	if s.DomainId == string(c.paths.ID) && s.Generation == c.generation && s.CoordinatorId == c.cfg.coordinatorID && s.Slot == "egress_proxy" && c.net.Allowlist() {
		return c.net.CommitStagedEgress(s)
	}
	return c.sb.SupervisorMessage(context.Background(), &lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Staged{Staged: s}})
}

// attachRunsc runs between the attached runsc's staged record and its
// acknowledgement (sandbox.Config.Attach): the sandbox joins RS's network
// namespace at boot, so runsc runs only once the connectivity helper has
// configured it.
func (c *coordinator) attachRunsc() error {
	waitStart := time.Now()
	if err := c.net.HelperReady(); err != nil {
		return err
	}
	// RS installs the routes on the helper's announcement: it precedes
	// the acknowledgement on the channel.
	c.mu.Lock()
	announced := c.helperAnnounced
	c.mu.Unlock()
	if announced != nil {
		<-announced
	}
	// What the connectivity helper adds to the start-up's critical path.
	c.log.Info("connectivity helper awaited", "helper_wait", time.Since(waitStart))
	// The Network Sidecar role is ready (the helper configured RS's
	// network namespace): recorded before the acknowledgement that lets
	// RS arm the causal edge and release runsc.
	c.mu.Lock()
	c.emit("StartSidecar", c.dom())
	c.mu.Unlock()
	return nil
}
