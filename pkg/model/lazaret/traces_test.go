package lazaret

import (
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
)

func steps(actions ...string) []check.Step[State] {
	out := make([]check.Step[State], len(actions))
	for i, a := range actions {
		out[i] = check.Step[State]{Action: a}
	}
	return out
}

var startupToPublish = []string{
	"StartNewDomain(S1)", "CreateTrustAnchor(D1)", "StartRuntimeSupervisor(D1)", "MountStateAnchor(D1)",
	"StartSidecar(D1)", "ArmRuntimeCausalEdge(D1)", "StartSandbox(D1)", "PublishDomain(D1)",
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Legal traces are accepted by the Next relation with every invariant
// holding in every state.
func TestLegalTracesAccepted(t *testing.T) {
	traces := map[string][]string{
		"auto-approved escalation and normal teardown": concat(startupToPublish, []string{
			"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "ReceiveEscalation(R1)", "AutoApprove(R1)",
			"StartHostExecution(R1)", "CompleteHostExecution(R1)", "DeliverResult(R1)", "DisconnectSession(S1)",
			"BeginTeardown(D1)", "StopSandbox(D1)", "StopSidecar(D1)", "UnmountStateAnchor(D1)",
			"GracefulSupervisorExit(D1)", "FinishTeardown(D1)",
		}),
		"prompted escalation with edited command": concat(startupToPublish, []string{
			"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "StartReadySession(S2)", "RegisterSession(S2)",
			"ReceiveEscalation(R2)", "QueuePrompt(R2)", "BeginPrompt(R2)", "DeveloperApprove(R2, EditedCmd)",
			"StartHostExecution(R2)", "CompleteHostExecution(R2)", "DeliverResult(R2)",
		}),
		"HC hard loss, lease teardown, bootstrap recovery": concat(startupToPublish, []string{
			"HardLoseHostCoordinator(D1)", "LeaseTeardownStopSandbox(D1)", "LeaseTeardownStopSidecar(D1)",
			"LeaseTeardownUnmountStateAnchor(D1)", "LeaseTeardownSupervisorExit(D1)",
			"BootstrapRecoveryCoordinator(D1)", "RecoverSandbox(D1)", "FinishRecovery(D1)",
			"StartNewDomain(S2)",
		}),
	}
	for name, tr := range traces {
		t.Run(name, func(t *testing.T) {
			for _, cfg := range []*Config{Fixture(), Reduced()} {
				m := New(cfg)
				sp := m.Spec()
				states, err := check.ReplaySteps(sp, m.Init(), steps(tr...))
				if err != nil {
					t.Fatalf("%s: legal trace rejected: %v", cfg.Name, err)
				}
				// The same behaviour, as a sequence of abstract states, is
				// accepted and explained by the same actions.
				labels, err := check.ReplayStates(sp, states)
				if err != nil {
					t.Fatalf("%s: state replay rejected: %v", cfg.Name, err)
				}
				if got, want := strings.Join(labels[1:], " "), strings.Join(tr, " "); got != want {
					t.Fatalf("labels %q, want %q", got, want)
				}
			}
		})
	}
}

// Illegal traces are rejected at the offending step.
func TestIllegalTracesRejected(t *testing.T) {
	m := New(Fixture())
	sp := m.Spec()
	cases := []struct {
		name  string
		trace []string
		step  int // index (1-based step) where the trace must be rejected
	}{
		{"publication before network readiness", []string{
			"StartNewDomain(S1)", "CreateTrustAnchor(D1)", "StartRuntimeSupervisor(D1)", "MountStateAnchor(D1)",
			"PublishDomain(D1)"}, 5},
		{"sandbox before network readiness", []string{
			"StartNewDomain(S1)", "CreateTrustAnchor(D1)", "StartRuntimeSupervisor(D1)", "MountStateAnchor(D1)",
			"ArmRuntimeCausalEdge(D1)"}, 5},
		{"host execution without approval", concat(startupToPublish, []string{
			"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "ReceiveEscalation(R1)", "StartHostExecution(R1)"}), 12},
		{"host execution of a prompted request before the developer decides", concat(startupToPublish, []string{
			"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "StartReadySession(S2)", "RegisterSession(S2)",
			"ReceiveEscalation(R2)", "QueuePrompt(R2)", "BeginPrompt(R2)", "StartHostExecution(R2)"}), 16},
		{"developer approval of a command other than the signed one", concat(startupToPublish, []string{
			"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "StartReadySession(S2)", "RegisterSession(S2)",
			"ReceiveEscalation(R2)", "QueuePrompt(R2)", "BeginPrompt(R2)", "DeveloperApprove(R2, PromptCmd)"}), 16},
		{"escalation with a foreign sandbox identity", concat(startupToPublish, []string{
			"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "ReceiveEscalation(R3)"}), 11},
		{"registration before publication", []string{"StartNewDomain(S1)", "StartReadySession(S2)"}, 2},
		{"recovery while the supervisor still holds the lease", concat(startupToPublish, []string{
			"HardLoseHostCoordinator(D1)", "BootstrapRecoveryCoordinator(D1)"}), 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := check.ReplaySteps(sp, m.Init(), steps(tc.trace...))
			re, ok := err.(*check.ReplayError)
			if !ok || err == nil {
				t.Fatalf("illegal trace accepted (err %v)", err)
			}
			if re.Index != tc.step {
				t.Fatalf("rejected at step %d (%v), want step %d", re.Index, err, tc.step)
			}
			t.Logf("rejected: %v", err)
		})
	}
}

// State-level illegal traces: a legal prefix followed by a forged state in
// which publication happened without network readiness, or a host process
// runs without approval. ReplayStates finds no action of Next that explains
// the forged step.
func TestIllegalStateTracesRejected(t *testing.T) {
	m := New(Fixture())
	sp := m.Spec()
	prefix, err := check.ReplaySteps(sp, m.Init(), steps(startupToPublish[:4]...))
	if err != nil {
		t.Fatal(err)
	}
	forged := prefix[len(prefix)-1]
	forged.DomainPhase[0] = Ready
	forged.LockOwner[0] = None
	forged.Published = 1
	forged.DurableDecision[0] = DecPublished
	if _, err := check.ReplayStates(sp, append(prefix, forged)); err == nil {
		t.Fatal("publication before network readiness accepted as a state trace")
	} else {
		t.Logf("publication before network readiness: %v", err)
	}

	attached, err := check.ReplaySteps(sp, m.Init(), steps(concat(startupToPublish, []string{
		"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "ReceiveEscalation(R1)"})...))
	if err != nil {
		t.Fatal(err)
	}
	x := attached[len(attached)-1]
	x.RequestPhase[0] = Executing
	x.SessionPhase[0] = SHostExecuting
	x.TerminalRoute[0] = HostProcess
	x.HostRunning = 1
	if _, err := check.ReplayStates(sp, append(attached, x)); err == nil {
		t.Fatal("host execution without approval accepted as a state trace")
	} else {
		t.Logf("host execution without approval: %v", err)
	}

	// A recorded state that disagrees with what the named action produces.
	good, _ := check.ReplaySteps(sp, m.Init(), steps(startupToPublish[:3]...))
	bad := good[len(good)-1]
	bad.StateAnchorState[0] = Mounted
	if _, err := check.ReplaySteps(sp, m.Init(), []check.Step[State]{
		{Action: "StartNewDomain(S1)"}, {Action: "CreateTrustAnchor(D1)"},
		{Action: "StartRuntimeSupervisor(D1)", State: &bad}}); err == nil {
		t.Fatal("step whose recorded state differs from the action's effect accepted")
	}
}

// A coordinator may die while it tears down a failed generation (two
// faults: the fixture's budget, not the reduced one's): the next
// coordinator's bootstrap recovery takes over. This is
// TestSpec32RecoveryNeverSignalsRecycledPID/recorded's trace: RS killed at
// teardown, then the coordinator killed while it recovers.
func TestCoordinatorLossInFailedGeneration(t *testing.T) {
	tr := concat(startupToPublish, []string{
		"AdvanceWaitingSession(S1)", "RegisterSession(S1)", "DisconnectSession(S1)", "BeginTeardown(D1)",
		"HardLoseRuntimeSupervisor(D1)", "HardLoseHostCoordinator(D1)",
		"BootstrapRecoveryCoordinator(D1)", "RecoverSandbox(D1)", "RecoverSidecar(D1)", "RecoverStateAnchor(D1)",
		"FinishRecovery(D1)", "StartNewDomain(S2)",
	})
	m := New(Fixture())
	if _, err := check.ReplaySteps(m.Spec(), m.Init(), steps(tr...)); err != nil {
		t.Fatalf("legal trace rejected: %v", err)
	}
	// And while recovering: the bootstrap coordinator dies too.
	tr = concat(startupToPublish, []string{
		"HardLoseHostCoordinator(D1)", "LeaseTeardownStopSandbox(D1)", "LeaseTeardownStopSidecar(D1)",
		"LeaseTeardownUnmountStateAnchor(D1)", "LeaseTeardownSupervisorExit(D1)",
		"BootstrapRecoveryCoordinator(D1)", "RecoverSandbox(D1)", "HardLoseHostCoordinator(D1)",
		"BootstrapRecoveryCoordinator(D1)", "FinishRecovery(D1)", "StartNewDomain(S2)",
	})
	if _, err := check.ReplaySteps(m.Spec(), m.Init(), steps(tr...)); err != nil {
		t.Fatalf("legal trace rejected: %v", err)
	}
}
