package trace

import "strings"

// ParamKind is the kind of a TLA+ action parameter; the Binding maps product
// identifiers of that kind to model values.
type ParamKind string

// Parameter kinds.
const (
	Domain     ParamKind = "Domain"     // Domain ID -> Domains
	Session    ParamKind = "Session"    // Session ID -> Sessions
	Request    ParamKind = "Request"    // Escalation Request ID -> Requests
	Command    ParamKind = "Command"    // approved command bytes digest -> Commands
	Artifact   ParamKind = "Artifact"   // prepared-artifact ID -> Artifacts
	Generation ParamKind = "Generation" // (Domain ID, generation) key -> Generations
)

// Kind describes one event kind: a TLA+ action, its parameters and the
// role(s) that record it. Role "env" marks an environment action (fault,
// process stop/resume, external reaper) that no component performs; it is
// recorded by the role named after the slash when that role observes it
// (e.g. "env/rs": the RS records HC hard loss on lifetime-pipe EOF).
type Kind struct {
	Model  string
	Action string
	Params []ParamKind
	Role   string
}

func k(model, action, role string, params ...ParamKind) Kind {
	return Kind{Model: model, Action: action, Params: params, Role: role}
}

// Vocabulary is the complete event vocabulary: every action of Next of both
// models (TestVocabularyMatchesModels keeps it in sync). For the Lazaret
// actions the products emit (package modeltrace), the role is the process
// that records them: the Host Coordinator records the steps RS attests in
// SupervisorStopped (StopSandbox, StopSidecar, UnmountStateAnchor) and RS's
// exit, and, as the next generation's coordinator, bootstrap recovery;
// tla/MAPPING.md names each emission point.
var Vocabulary = []Kind{
	// Lazaret.tla — Domain and Session lifecycle.
	k("Lazaret", "StartNewDomain", "hc", Session),
	k("Lazaret", "StartReadySession", "hc", Session),
	k("Lazaret", "WaitForDomain", "hc", Session),
	k("Lazaret", "RestartWaitingDomain", "hc", Session),
	k("Lazaret", "AdvanceWaitingSession", "hc", Session),
	k("Lazaret", "RejectConfigurationMismatch", "hc cli", Session),
	k("Lazaret", "RegisterSession", "hc", Session),
	k("Lazaret", "DisconnectSession", "hc", Session),
	k("Lazaret", "CreateTrustAnchor", "hc", Domain),
	k("Lazaret", "StartRuntimeSupervisor", "hc", Domain),
	k("Lazaret", "MountStateAnchor", "rs", Domain),
	k("Lazaret", "StartSidecar", "hc", Domain),
	k("Lazaret", "ArmRuntimeCausalEdge", "rs", Domain),
	k("Lazaret", "StartSandbox", "rs", Domain),
	k("Lazaret", "PublishDomain", "hc", Domain),
	k("Lazaret", "BeginTeardown", "hc", Domain),
	k("Lazaret", "StopSandbox", "hc", Domain),
	k("Lazaret", "StopSidecar", "hc", Domain),
	k("Lazaret", "UnmountStateAnchor", "hc", Domain),
	k("Lazaret", "GracefulSupervisorExit", "hc", Domain),
	k("Lazaret", "FinishTeardown", "hc", Domain),
	k("Lazaret", "HostCoordinatorTerminateUnresponsiveRuntime", "hc", Domain),
	k("Lazaret", "LeaseTeardownStopSandbox", "rs", Domain),
	k("Lazaret", "LeaseTeardownStopSidecar", "rs", Domain),
	k("Lazaret", "LeaseTeardownUnmountStateAnchor", "rs", Domain),
	k("Lazaret", "LeaseTeardownSupervisorExit", "rs", Domain),
	k("Lazaret", "ExternalReapStoppedSupervisorAfterHcLoss", "env/bootstrap", Domain),
	k("Lazaret", "BootstrapRecoveryCoordinator", "hc bootstrap", Domain),
	k("Lazaret", "BeginRecovery", "hc", Domain),
	k("Lazaret", "RecoverSandbox", "hc bootstrap", Domain),
	k("Lazaret", "RecoverSidecar", "hc bootstrap", Domain),
	k("Lazaret", "RecoverStateAnchor", "hc bootstrap", Domain),
	k("Lazaret", "FinishRecovery", "hc bootstrap", Domain),
	k("Lazaret", "FailDomain", "hc", Domain),
	k("Lazaret", "HardLoseHostCoordinator", "env/rs bootstrap", Domain),
	k("Lazaret", "HardLoseRuntimeSupervisor", "env/hc", Domain),
	k("Lazaret", "HardLoseAttachedRunsc", "env/rs hc", Domain),
	k("Lazaret", "StopHostCoordinatorProcess", "env/rs", Domain),
	k("Lazaret", "ResumeHostCoordinatorProcess", "env/rs", Domain),
	k("Lazaret", "StopRuntimeSupervisorProcess", "env/hc", Domain),
	k("Lazaret", "ResumeRuntimeSupervisorProcess", "env/hc", Domain),
	k("Lazaret", "StopAttachedRunscProcess", "env/rs", Domain),
	k("Lazaret", "ResumeAttachedRunscProcess", "env/rs", Domain),
	k("Lazaret", "ObservePathMismatch", "hc bootstrap", Domain),
	k("Lazaret", "RefusePathMismatchCleanup", "hc bootstrap", Domain),
	// Lazaret.tla — host escalation.
	k("Lazaret", "ReceiveEscalation", "hc", Request),
	k("Lazaret", "AutoApprove", "hc", Request),
	k("Lazaret", "QueuePrompt", "hc", Request),
	k("Lazaret", "BeginPrompt", "hc", Request),
	k("Lazaret", "DeveloperApprove", "hc", Request, Command),
	k("Lazaret", "DeveloperDeny", "hc", Request),
	k("Lazaret", "StartHostExecution", "hc", Request),
	k("Lazaret", "CompleteHostExecution", "hc", Request),
	k("Lazaret", "TimeoutRequest", "hc", Request),
	k("Lazaret", "CancelRequest", "hc", Request),
	k("Lazaret", "FailHostExecution", "hc", Request),
	k("Lazaret", "DeliverResult", "hc", Request),

	// PreparedLower.tla.
	k("PreparedLower", "BeginPrepare", "rs", Artifact),
	k("PreparedLower", "CreateStageTree", "rs", Artifact),
	k("PreparedLower", "PublishArtifact", "rs cli", Artifact),
	k("PreparedLower", "RecoverStage", "rs cli", Artifact),
	k("PreparedLower", "ReclaimArtifact", "cli rs hc", Artifact),
	k("PreparedLower", "AcquireLeaseIntent", "hc", Generation),
	k("PreparedLower", "InsertLease", "hc", Generation),
	k("PreparedLower", "CommitLeaseHeld", "hc", Generation),
	k("PreparedLower", "SpawnSupervisor", "hc", Generation),
	k("PreparedLower", "CommitSupervisor", "hc", Generation),
	k("PreparedLower", "AnchorIntent", "hc", Generation),
	k("PreparedLower", "MountAnchor", "rs", Generation),
	k("PreparedLower", "CommitAnchorPrepared", "hc", Generation),
	k("PreparedLower", "PublishGeneration", "hc", Generation),
	k("PreparedLower", "AnchorReleaseIntent", "hc bootstrap", Generation),
	k("PreparedLower", "UnmountAnchor", "rs", Generation),
	k("PreparedLower", "AnchorClean", "hc bootstrap", Generation),
	k("PreparedLower", "ReleaseUnanchoredLower", "hc bootstrap", Generation),
	k("PreparedLower", "RemoveLease", "hc bootstrap", Generation),
	k("PreparedLower", "LowerClean", "hc bootstrap", Generation),
	k("PreparedLower", "StopSupervisor", "hc", Generation),
	k("PreparedLower", "ClearSupervisorSlot", "hc bootstrap", Generation),
	k("PreparedLower", "FinishGeneration", "hc bootstrap", Generation),
	k("PreparedLower", "LeaseLossUnmount", "rs", Generation),
	k("PreparedLower", "LeaseLossExit", "rs", Generation),
	k("PreparedLower", "BootstrapRecoveryCoordinator", "hc bootstrap", Generation),
	k("PreparedLower", "BeginRecovery", "hc", Generation),
	k("PreparedLower", "RecoveryUnmountAnchor", "hc bootstrap", Generation),
	k("PreparedLower", "PreparerCrash", "env/rs cli", Artifact),
	k("PreparedLower", "BeginReclaim", "cli rs", Artifact),
	k("PreparedLower", "RollbackReclaim", "cli rs hc", Artifact),
	k("PreparedLower", "BeginRelease", "hc", Generation),
	k("PreparedLower", "HardLoseHostCoordinator", "env/rs bootstrap", Generation),
	k("PreparedLower", "HardLoseSupervisor", "env/hc", Generation),
}

// RecordedBy reports whether role may record events of this kind.
func (k Kind) RecordedBy(role string) bool {
	for _, r := range strings.FieldsFunc(k.Role, func(c rune) bool { return c == ' ' || c == '/' }) {
		if r == role && r != "env" {
			return true
		}
	}
	return false
}

// Lookup returns the vocabulary entry of a model's action.
func Lookup(model, action string) (Kind, bool) {
	for _, v := range Vocabulary {
		if v.Model == model && v.Action == action {
			return v, true
		}
	}
	return Kind{}, false
}
