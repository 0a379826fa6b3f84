package lazaret

// Mutation names a deliberate defect that tests inject into the model to
// prove that the checker catches it (the checker's "teeth"). The default
// model has none. Each mutation is one of: a removed guard, two steps
// swapped, a dropped UNCHANGED (the variable becomes unconstrained over its
// type, i.e. the implementation may leave any value there), or weakened
// fairness / a wrong guard that only breaks liveness.
type Mutation string

const (
	// MutSandboxWithoutNetworkReadiness removes the network-readiness guard
	// sidecarState[d] = "Ready" from both ArmRuntimeCausalEdge and
	// StartSandbox (removing it from either alone is an equivalent mutant:
	// the other still blocks the start).
	MutSandboxWithoutNetworkReadiness Mutation = "ArmRuntimeCausalEdge, StartSandbox: remove guard sidecarState[d] = \"Ready\""
	// MutHostExecutionWithoutApproval lets StartHostExecution run a request
	// that is Verified or AwaitingApproval (removes requestPhase[r] =
	// "Approved").
	MutHostExecutionWithoutApproval Mutation = "StartHostExecution: remove guard requestPhase[r] = \"Approved\""
	// MutReceiveUnmatchedIdentity removes RequestIdentityTupleMatches(r)
	// from ReceiveEscalation.
	MutReceiveUnmatchedIdentity Mutation = "ReceiveEscalation: remove guard RequestIdentityTupleMatches(r)"
	// MutSwapStopSandboxSidecar swaps the teardown steps StopSandbox and
	// StopSidecar (the sidecar stops first).
	MutSwapStopSandboxSidecar Mutation = "swap StopSandbox and StopSidecar"
	// MutStartSandboxWithoutIntent drops durableSandboxIntent' = TRUE from
	// StartSandbox (intent no longer precedes the create).
	MutStartSandboxWithoutIntent Mutation = "StartSandbox: durableSandboxIntent UNCHANGED instead of TRUE"
	// MutHcLossKeepsLeaseHeld leaves supervisorLease unchanged in
	// HardLoseHostCoordinator.
	MutHcLossKeepsLeaseHeld Mutation = "HardLoseHostCoordinator: supervisorLease UNCHANGED instead of Lost"
	// MutStopHcDropsUnchangedPublished drops published from the UNCHANGED
	// list of StopHostCoordinatorProcess.
	MutStopHcDropsUnchangedPublished Mutation = "StopHostCoordinatorProcess: drop published from UNCHANGED"
	// MutDeliverDropsUnchangedHostRunning drops hostRunning from the
	// UNCHANGED list of DeliverResult.
	MutDeliverDropsUnchangedHostRunning Mutation = "DeliverResult: drop hostRunning from UNCHANGED"

	// Liveness-only mutations: every invariant still holds.

	// MutBeginRecoveryUnfair removes BeginRecovery from
	// DomainServiceProgress, so it is no longer weakly fair.
	MutBeginRecoveryUnfair Mutation = "BeginRecovery not weakly fair"
	// MutRegisterSessionUnfair removes RegisterSession from SessionProgress.
	MutRegisterSessionUnfair Mutation = "RegisterSession not weakly fair"
	// MutDeliverOnlyWhenDisconnected inverts DeliverResult's connection guard.
	MutDeliverOnlyWhenDisconnected Mutation = "DeliverResult: guard connectionState[s] = \"Disconnected\""
	// MutDenyKeepsPromptRoute leaves terminalRoute unchanged in DeveloperDeny.
	MutDenyKeepsPromptRoute Mutation = "DeveloperDeny: terminalRoute UNCHANGED instead of Sandbox"
	// MutNoTeardown disables BeginTeardown.
	MutNoTeardown Mutation = "BeginTeardown never enabled"
)

// unfair reports whether a mutation removes kind from its fairness group.
func (m *Model) unfair(k actionKind) bool {
	return (k == kBeginRecovery && m.mut(MutBeginRecoveryUnfair)) ||
		(k == kRegisterSession && m.mut(MutRegisterSessionUnfair))
}

// havoc returns, for an action whose UNCHANGED list a mutation shortened,
// a function yielding every value of the freed variable.
func (m *Model) havoc(k actionKind) func(t State, yield func(State)) {
	switch {
	case k == kStopHostCoordinatorProcess && m.mut(MutStopHcDropsUnchangedPublished):
		return func(t State, yield func(State)) {
			for set := 0; set < 1<<uint(len(m.C.Domains)); set++ {
				t.Published = uint8(set)
				yield(t)
			}
		}
	case k == kDeliverResult && m.mut(MutDeliverDropsUnchangedHostRunning):
		return func(t State, yield func(State)) {
			for set := 0; set < 1<<uint(len(m.C.Requests)); set++ {
				t.HostRunning = uint8(set)
				yield(t)
			}
		}
	}
	return nil
}

// Mutations that give each remaining invariant (and the seed form of
// EmptyDomainEventuallyStops) a defect of the actions that only it names;
// TestEveryPropertyHasTeeth pairs each property with one of them.
const (
	// MutFaultBudgetUnchecked drops the guard runtimeFaultsRemaining[d] > 0
	// of ConsumeRuntimeFault: the budget is decremented past zero.
	MutFaultBudgetUnchecked Mutation = "ConsumeRuntimeFault: remove guard runtimeFaultsRemaining[d] > 0"
	// MutStartUnsafeConfig starts a Domain whose configuration is not
	// confinement-safe (removes ConfigSafe[d] from StartNewDomain and
	// RestartWaitingDomain).
	MutStartUnsafeConfig Mutation = "StartNewDomain, RestartWaitingDomain: remove guard ConfigSafe[d]"
	// MutSandboxUnsafeIsolation starts a sandbox whose namespace isolation
	// was not proven (removes SandboxIsolationSafe[d] from StartSandbox).
	MutSandboxUnsafeIsolation Mutation = "StartSandbox: remove guard SandboxIsolationSafe[d]"
	// MutFinishTeardownKeepsLock leaks the Domain lock: FinishTeardown
	// leaves domainLockHeld TRUE.
	MutFinishTeardownKeepsLock Mutation = "FinishTeardown: domainLockHeld UNCHANGED instead of FALSE"
	// MutSandboxWithoutCausalEdge creates the sandbox before the runtime
	// causal edge is armed (removes runtimeCausalEdge[d] = "Armed").
	MutSandboxWithoutCausalEdge Mutation = "StartSandbox: remove guard runtimeCausalEdge[d] = \"Armed\""
	// MutRsLossKeepsCausalEdge forgets to disarm the causal edge when the
	// Runtime Supervisor dies.
	MutRsLossKeepsCausalEdge Mutation = "HardLoseRuntimeSupervisor: runtimeCausalEdge UNCHANGED instead of Unarmed"
	// MutReapKeepsSandbox: the external reaper kills a stopped supervisor
	// after HC loss without applying the causal edge to the sandbox.
	MutReapKeepsSandbox Mutation = "ExternalReapStoppedSupervisorAfterHcLoss: sandboxState UNCHANGED instead of Stopped"
	// MutHcLossKeepsPublished leaves the Domain published when its Host
	// Coordinator is hard-lost.
	MutHcLossKeepsPublished Mutation = "HardLoseHostCoordinator: published UNCHANGED instead of published \\ {d}"
	// MutSupervisorExitWhileMounted lets the supervisor exit gracefully with
	// the State Anchor still mounted (removes stateAnchorState[d] =
	// "Unmounted").
	MutSupervisorExitWhileMounted Mutation = "GracefulSupervisorExit: remove guard stateAnchorState[d] = \"Unmounted\""
	// MutBootstrapKeepsDeadHc: the bootstrap recovery coordinator is not
	// recorded as the Domain's Host Coordinator process.
	MutBootstrapKeepsDeadHc Mutation = "BootstrapRecoveryCoordinator: hostCoordinatorProc UNCHANGED instead of Alive"
	// MutLeaseBeforeSupervisorSpawn arms the supervisor lease although the
	// supervisor process was never spawned.
	MutLeaseBeforeSupervisorSpawn Mutation = "StartRuntimeSupervisor: runtimeSupervisorProc UNCHANGED instead of Alive"
	// MutLeaseTeardownSidecarFirst: the lease teardown stops the sidecar
	// before the sandbox (removes sandboxState[d] = "Stopped").
	MutLeaseTeardownSidecarFirst Mutation = "LeaseTeardownStopSidecar: remove guard sandboxState[d] = \"Stopped\""
	// MutGenerationNotBumped starts a Domain without incrementing its
	// generation.
	MutGenerationNotBumped Mutation = "StartNewDomain: domainGeneration UNCHANGED instead of + 1"
	// MutPublishKeepsDecision publishes without committing the durable
	// decision Published.
	MutPublishKeepsDecision Mutation = "PublishDomain: durableDecision UNCHANGED instead of Published"
	// MutObserveMismatchWhileRunning records a path mismatch while the
	// sandbox still runs (removes sandboxState[d] = "Stopped" and
	// attachedRunscProc[d] = "Absent" from ObservePathMismatch).
	MutObserveMismatchWhileRunning Mutation = "ObservePathMismatch: remove guards sandbox Stopped, runsc Absent"
	// MutPublishKeepsLockOwner keeps the bootstrap lock owner after
	// publication.
	MutPublishKeepsLockOwner Mutation = "PublishDomain: lockOwner UNCHANGED instead of NoSession"
	// MutTeardownKeepsPublished begins teardown without unpublishing.
	MutTeardownKeepsPublished Mutation = "BeginTeardown: published UNCHANGED instead of published \\ {d}"
	// MutDisconnectKeepsRegistered drops a disconnected session from
	// connected but not from registered.
	MutDisconnectKeepsRegistered Mutation = "DisconnectSession: registered UNCHANGED"
	// MutFailDomainKeepsSessions fails a Domain without failing its open
	// sessions and requests (FailOpenSessionsAndRequests omitted).
	MutFailDomainKeepsSessions Mutation = "FailDomain: omit FailOpenSessionsAndRequests(d)"
	// MutDisconnectKeepsRequest leaves the active request of a closed
	// session live (not Cancelled).
	MutDisconnectKeepsRequest Mutation = "DisconnectSession: requestPhase UNCHANGED instead of Cancelled"
	// MutApproveAnyCommand accepts a developer approval of a command other
	// than the signed one (removes cmd = ApprovalCommand[r]).
	MutApproveAnyCommand Mutation = "DeveloperApprove: remove guard cmd = ApprovalCommand[r]"
	// MutAutoApproveShell auto-approves a command that needs a shell
	// (removes ~CommandRequiresShell[RequestCommand[r]] from AutoApprove).
	MutAutoApproveShell Mutation = "AutoApprove: remove guard ~CommandRequiresShell[RequestCommand[r]]"
	// MutBeginPromptKeepsRoute shows the approval prompt without routing the
	// terminal to it.
	MutBeginPromptKeepsRoute Mutation = "BeginPrompt: terminalRoute UNCHANGED instead of Prompt"
	// MutDisconnectKeepsHostProcess leaves the host process running when its
	// session disconnects.
	MutDisconnectKeepsHostProcess Mutation = "DisconnectSession: hostRunning UNCHANGED"
	// MutFinishRecoveryWhileMounted finishes recovery with the State Anchor
	// still mounted (removes stateAnchorState[d] = "Unmounted").
	MutFinishRecoveryWhileMounted Mutation = "FinishRecovery: remove guard stateAnchorState[d] = \"Unmounted\""
	// MutFailKeepsTrust fails a Domain without revoking its trust anchor.
	MutFailKeepsTrust Mutation = "FailDomain: trustReady UNCHANGED instead of FALSE"
	// MutRecoverAnchorBeforeSidecar unmounts the State Anchor in recovery
	// before the sidecar is stopped (removes sidecarState[d] = "Stopped").
	MutRecoverAnchorBeforeSidecar Mutation = "RecoverStateAnchor: remove guard sidecarState[d] = \"Stopped\""
	// MutDeliverKeepsActiveRequest delivers a result without clearing the
	// session's active request.
	MutDeliverKeepsActiveRequest Mutation = "DeliverResult: activeRequest UNCHANGED instead of NoRequest"
	// MutInitDomainRunning starts the model with Domain D1 already running
	// and published, as after a Host Coordinator that adopted a live Domain
	// on restart. It is the only way to give the seed form of
	// EmptyDomainEventuallyStops teeth (reading R6: from the module's Init
	// the Domain is Absent, so the seed property holds vacuously);
	// TestEveryPropertyHasTeeth combines it with MutNoTeardown.
	MutInitDomainRunning Mutation = "Init: Domain D1 already running and published"
)

// runningDomain sets Domain d of st to a published, fully started
// generation 1 (the state PublishDomain reaches), for MutInitDomainRunning.
func (m *Model) runningDomain(st *State, d int) {
	st.DomainPhase[d] = Ready
	st.StateAnchorState[d] = Mounted
	st.SidecarState[d] = ResReady
	st.SandboxState[d] = ResReady
	st.TrustReady[d] = true
	st.DomainLockHeld[d] = true
	st.HostCoordinatorProc[d] = ProcAlive
	st.RuntimeSupervisorProc[d] = ProcAlive
	st.AttachedRunscProc[d] = ProcAlive
	st.RuntimeCausalEdge[d] = Armed
	st.SupervisorLease[d] = LeaseHeld
	st.DomainGeneration[d] = 1
	st.DurableDecision[d] = DecPublished
	st.DurableSandboxIntent[d] = true
	st.Published |= 1 << uint(d)
}
