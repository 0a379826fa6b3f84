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
