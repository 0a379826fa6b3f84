package lazaret

import (
	"os"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

// tooth pairs a property of tla/Lazaret.cfg with a seeded defect that only
// it needs to catch: checked alone, the property must be violated with a
// counterexample that is a behaviour of the defective model.
type tooth struct {
	prop string
	muts []Mutation
	// full checks the tla/Lazaret.cfg fixture instead of the reduced one
	// (the defect needs the second runtime fault of the fixture's budget).
	full bool
	// fixture changes constants (a deployment whose configuration makes the
	// defect observable). With muts, the unmutated model must still satisfy
	// the property on the changed fixture, so the guard the mutant removes is
	// what protects it; without muts the property is a predicate on the
	// constants that no action can falsify, and the changed fixture is the
	// defect.
	fixture func(*Config)
}

// teeth has at least one entry per invariant and liveness property.
var teeth = []tooth{
	{prop: "TypeOK", muts: []Mutation{MutFaultBudgetUnchecked}},
	{prop: "ConfigurationConfinement", muts: []Mutation{MutStartUnsafeConfig},
		fixture: func(c *Config) { c.ConfigSafe[0] = false }},
	{prop: "SandboxNamespaceIsolation", muts: []Mutation{MutSandboxUnsafeIsolation},
		fixture: func(c *Config) { c.SandboxIsolationSafe[0] = false }},
	{prop: "OrderedNetworkStartup", muts: []Mutation{MutSandboxWithoutNetworkReadiness}},
	{prop: "OrderedNetworkStartup", muts: []Mutation{MutSwapStopSandboxSidecar}},
	{prop: "PublishedDomainsReady", muts: []Mutation{MutStopHcDropsUnchangedPublished}},
	{prop: "DomainLockLifetime", muts: []Mutation{MutFinishTeardownKeepsLock}},
	{prop: "RuntimeCausalEdgeArmedBeforeSandbox", muts: []Mutation{MutSandboxWithoutCausalEdge}},
	{prop: "RuntimeCausalEdgeOwnerPresent", muts: []Mutation{MutRsLossKeepsCausalEdge}},
	{prop: "SandboxRunningImpliesCoordinatorPresent", muts: []Mutation{MutReapKeepsSandbox}, full: true},
	{prop: "PublishedRuntimeAuthorityPresent", muts: []Mutation{MutHcLossKeepsPublished}},
	{prop: "SupervisorLeaseConsistency", muts: []Mutation{MutHcLossKeepsLeaseHeld}},
	{prop: "RuntimeResourceOwnership", muts: []Mutation{MutSupervisorExitWhileMounted}},
	{prop: "CoordinatorPhysicalConsistency", muts: []Mutation{MutBootstrapKeepsDeadHc}},
	{prop: "NoVanishPresentRuntime", muts: []Mutation{MutLeaseBeforeSupervisorSpawn}},
	{prop: "OrderedLeaseTeardown", muts: []Mutation{MutLeaseTeardownSidecarFirst}},
	{prop: "DomainGenerationBounds", muts: []Mutation{MutGenerationNotBumped}},
	{prop: "DurableIntentBeforeSandboxReady", muts: []Mutation{MutStartSandboxWithoutIntent}},
	{prop: "DurableDecisionPublicationConsistent", muts: []Mutation{MutPublishKeepsDecision}},
	{prop: "PathMismatchNotAdopted", muts: []Mutation{MutObserveMismatchWhileRunning}},
	{prop: "ExclusiveBootstrapOwnership", muts: []Mutation{MutPublishKeepsLockOwner}},
	{prop: "TeardownNotJoinable", muts: []Mutation{MutTeardownKeepsPublished}},
	{prop: "RegisteredSessionsConnected", muts: []Mutation{MutDisconnectKeepsRegistered}},
	{prop: "AttachedSessionsValid", muts: []Mutation{MutFailDomainKeepsSessions}},
	{prop: "AuthenticatedRequestsOnly", muts: []Mutation{MutReceiveUnmatchedIdentity}},
	// A predicate on constants only: the sidecar presenting the Host
	// Coordinator's identity.
	{prop: "RuntimeRoleIdentitySeparation",
		fixture: func(c *Config) { c.DomainSidecarIdentity[0] = c.DomainCoordinatorIdentity[0] }},
	// RegisterSession has no guard comparing a new session's identities with
	// the registered ones, so this invariant rests on the fixture's distinct
	// identities: two sessions presenting the same CLI identity.
	{prop: "RegisteredSessionIdentityUniqueness",
		fixture: func(c *Config) { c.SessionCliIdentity[1] = c.SessionCliIdentity[0] }},
	{prop: "LiveRequestIdentityAuthorized", muts: []Mutation{MutDisconnectKeepsRequest}},
	{prop: "DeveloperApprovalAuthenticated", muts: []Mutation{MutApproveAnyCommand}},
	{prop: "HostExecutionAuthorized", muts: []Mutation{MutHostExecutionWithoutApproval}},
	{prop: "HostExecutionAuthorized", muts: []Mutation{MutDeliverDropsUnchangedHostRunning}},
	// R3 (the auto-rule shell command) is rejected at ReceiveEscalation in
	// the fixture (foreign sandbox identity); with a matching identity it
	// reaches AutoApprove, whose shell guard is then what protects.
	{prop: "AutoApprovalNoShell", muts: []Mutation{MutAutoApproveShell},
		fixture: func(c *Config) { c.RequestSandboxIdentity[2] = c.DomainSandboxIdentity[0] }},
	{prop: "TerminalIsolation", muts: []Mutation{MutBeginPromptKeepsRoute}},
	{prop: "NoOrphanHostProcess", muts: []Mutation{MutDisconnectKeepsHostProcess}},
	{prop: "StateAnchorOwnership", muts: []Mutation{MutFinishRecoveryWhileMounted}},
	{prop: "FailedDomainIsolation", muts: []Mutation{MutFailKeepsTrust}},
	{prop: "OrderedFailureRecovery", muts: []Mutation{MutRecoverAnchorBeforeSidecar}},
	{prop: "ResultDeliveryStateConsistent", muts: []Mutation{MutDeliverKeepsActiveRequest}},

	{prop: "SessionEventuallyResolves", muts: []Mutation{MutRegisterSessionUnfair}},
	{prop: "RequestEventuallyResolves", muts: []Mutation{MutDeliverOnlyWhenDisconnected}},
	{prop: "PromptEventuallyRestoresTerminal", muts: []Mutation{MutDenyKeepsPromptRoute}},
	// The seed form is vacuous from the module's Init (reading R6): only a
	// model that starts with a running Domain, and never tears it down, can
	// violate it.
	{prop: "EmptyDomainEventuallyStops", muts: []Mutation{MutInitDomainRunning, MutNoTeardown}},
	{prop: "FailedDomainEventuallyRecovers", muts: []Mutation{MutBeginRecoveryUnfair}},
	{prop: "EmptyDomainEventuallyStopsAlways", muts: []Mutation{MutNoTeardown}},
}

// TestEveryPropertyHasTeeth requires, for every invariant and property that
// tla/Lazaret.cfg lists, a seeded defect that the property catches when it
// is checked alone, with a counterexample that replays through the
// defective model. A property listed in the .cfg without an entry in teeth
// fails the test.
func TestEveryPropertyHasTeeth(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: the teeth runs (a model check per property) are long; make test-model runs them")
	}
	cfg, err := os.ReadFile("../../../tla/Lazaret.cfg")
	if err != nil {
		t.Fatal(err)
	}
	names := append(check.CfgSection(cfg, "INVARIANTS"), check.CfgSection(cfg, "PROPERTIES")...)
	if len(names) == 0 {
		t.Fatal("tla/Lazaret.cfg lists no INVARIANTS or PROPERTIES")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			n := 0
			for _, th := range teeth {
				if th.prop == name {
					n++
					checkTooth(t, th)
				}
			}
			if n == 0 {
				t.Fatalf("%s has no seeded defect that violates it: add a mutation of the actions to mutations.go and an entry to teeth", name)
			}
		})
	}
	listed := map[string]bool{}
	for _, n := range names {
		listed[n] = true
	}
	for _, th := range teeth {
		if !listed[th.prop] {
			t.Errorf("teeth entry for %s, which tla/Lazaret.cfg does not list", th.prop)
		}
	}
}

func checkTooth(t *testing.T, th tooth) {
	t.Helper()
	cfg := Reduced()
	if th.full {
		cfg = Fixture()
	}
	if th.fixture != nil {
		th.fixture(cfg)
	}
	opt := check.Options{Liveness: true, MaxStates: 1_000_000, MaxHeapBytes: 2 << 30}
	if th.fixture != nil && len(th.muts) > 0 {
		sp, _, _ := check.Only(New(cfg).Spec(), th.prop)
		res := check.Run(sp, opt)
		if v := res.First(); v != nil || !res.Complete {
			t.Fatalf("the unmutated model does not satisfy %s on the changed fixture (complete %v): %v", th.prop, res.Complete, v)
		}
	}
	m := New(cfg)
	m.Mutations = map[Mutation]bool{}
	for _, x := range th.muts {
		m.Mutations[x] = true
	}
	sp, kind, ok := check.Only(m.Spec(), th.prop)
	if !ok {
		t.Fatalf("the transcription has no property %s", th.prop)
	}
	res := check.Run(sp, opt)
	v := res.First()
	if v == nil {
		t.Fatalf("%v: %s not violated (%d states, complete %v)", th.muts, th.prop, res.Distinct, res.Complete)
	}
	if err := check.Confirm(sp, kind, v, m.Format); err != nil {
		t.Fatalf("%v: %s: %v", th.muts, th.prop, err)
	}
	t.Logf("%v: %s %s violated after %d states; counterexample of %d states", th.muts, v.Kind, v.Name, res.Distinct, len(v.Trace))
}
