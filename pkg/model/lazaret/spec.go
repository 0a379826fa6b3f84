package lazaret

import (
	"fmt"

	"github.com/lazaret/lazaret/pkg/model/check"
)

type actionKind int

// Action kinds, one per TLA+ action of Next.
const (
	kStartNewDomain actionKind = iota
	kStartReadySession
	kWaitForDomain
	kRestartWaitingDomain
	kAdvanceWaitingSession
	kRejectConfigurationMismatch
	kRegisterSession
	kDisconnectSession
	kCreateTrustAnchor
	kStartRuntimeSupervisor
	kMountStateAnchor
	kStartSidecar
	kArmRuntimeCausalEdge
	kStartSandbox
	kPublishDomain
	kBeginTeardown
	kStopSandbox
	kStopSidecar
	kUnmountStateAnchor
	kGracefulSupervisorExit
	kFinishTeardown
	kHostCoordinatorTerminateUnresponsiveRuntime
	kLeaseTeardownStopSandbox
	kLeaseTeardownStopSidecar
	kLeaseTeardownUnmountStateAnchor
	kLeaseTeardownSupervisorExit
	kExternalReapStoppedSupervisorAfterHcLoss
	kBootstrapRecoveryCoordinator
	kBeginRecovery
	kRecoverSandbox
	kRecoverSidecar
	kRecoverStateAnchor
	kFinishRecovery
	kFailDomain
	kHardLoseHostCoordinator
	kHardLoseRuntimeSupervisor
	kHardLoseAttachedRunsc
	kStopHostCoordinatorProcess
	kResumeHostCoordinatorProcess
	kStopRuntimeSupervisorProcess
	kResumeRuntimeSupervisorProcess
	kStopAttachedRunscProcess
	kResumeAttachedRunscProcess
	kObservePathMismatch
	kRefusePathMismatchCleanup
	kReceiveEscalation
	kAutoApprove
	kQueuePrompt
	kBeginPrompt
	kDeveloperApprove
	kDeveloperDeny
	kStartHostExecution
	kCompleteHostExecution
	kTimeoutRequest
	kCancelRequest
	kFailHostExecution
	kDeliverResult
)

var kindNames = map[actionKind]string{
	kStartNewDomain: "StartNewDomain", kStartReadySession: "StartReadySession", kWaitForDomain: "WaitForDomain",
	kRestartWaitingDomain: "RestartWaitingDomain", kAdvanceWaitingSession: "AdvanceWaitingSession",
	kRejectConfigurationMismatch: "RejectConfigurationMismatch", kRegisterSession: "RegisterSession",
	kDisconnectSession: "DisconnectSession", kCreateTrustAnchor: "CreateTrustAnchor",
	kStartRuntimeSupervisor: "StartRuntimeSupervisor", kMountStateAnchor: "MountStateAnchor",
	kStartSidecar: "StartSidecar", kArmRuntimeCausalEdge: "ArmRuntimeCausalEdge", kStartSandbox: "StartSandbox",
	kPublishDomain: "PublishDomain", kBeginTeardown: "BeginTeardown", kStopSandbox: "StopSandbox",
	kStopSidecar: "StopSidecar", kUnmountStateAnchor: "UnmountStateAnchor",
	kGracefulSupervisorExit: "GracefulSupervisorExit", kFinishTeardown: "FinishTeardown",
	kHostCoordinatorTerminateUnresponsiveRuntime: "HostCoordinatorTerminateUnresponsiveRuntime",
	kLeaseTeardownStopSandbox:                    "LeaseTeardownStopSandbox", kLeaseTeardownStopSidecar: "LeaseTeardownStopSidecar",
	kLeaseTeardownUnmountStateAnchor:          "LeaseTeardownUnmountStateAnchor",
	kLeaseTeardownSupervisorExit:              "LeaseTeardownSupervisorExit",
	kExternalReapStoppedSupervisorAfterHcLoss: "ExternalReapStoppedSupervisorAfterHcLoss",
	kBootstrapRecoveryCoordinator:             "BootstrapRecoveryCoordinator", kBeginRecovery: "BeginRecovery",
	kRecoverSandbox: "RecoverSandbox", kRecoverSidecar: "RecoverSidecar", kRecoverStateAnchor: "RecoverStateAnchor",
	kFinishRecovery: "FinishRecovery", kFailDomain: "FailDomain", kHardLoseHostCoordinator: "HardLoseHostCoordinator",
	kHardLoseRuntimeSupervisor: "HardLoseRuntimeSupervisor", kHardLoseAttachedRunsc: "HardLoseAttachedRunsc",
	kStopHostCoordinatorProcess: "StopHostCoordinatorProcess", kResumeHostCoordinatorProcess: "ResumeHostCoordinatorProcess",
	kStopRuntimeSupervisorProcess: "StopRuntimeSupervisorProcess", kResumeRuntimeSupervisorProcess: "ResumeRuntimeSupervisorProcess",
	kStopAttachedRunscProcess: "StopAttachedRunscProcess", kResumeAttachedRunscProcess: "ResumeAttachedRunscProcess",
	kObservePathMismatch: "ObservePathMismatch", kRefusePathMismatchCleanup: "RefusePathMismatchCleanup",
	kReceiveEscalation: "ReceiveEscalation", kAutoApprove: "AutoApprove", kQueuePrompt: "QueuePrompt",
	kBeginPrompt: "BeginPrompt", kDeveloperApprove: "DeveloperApprove", kDeveloperDeny: "DeveloperDeny",
	kStartHostExecution: "StartHostExecution", kCompleteHostExecution: "CompleteHostExecution",
	kTimeoutRequest: "TimeoutRequest", kCancelRequest: "CancelRequest", kFailHostExecution: "FailHostExecution",
	kDeliverResult: "DeliverResult",
}

// ActionNames lists the TLA+ action names of Next, for MAPPING.md checks.
func ActionNames() []string {
	out := make([]string, 0, len(kindNames))
	for k := kStartNewDomain; k <= kDeliverResult; k++ {
		out = append(out, kindNames[k])
	}
	return out
}

type instance struct {
	kind actionKind
	a, b int
}

// The disjuncts of the weakly fair groups of Spec.
var (
	sessionProgress = []actionKind{kStartNewDomain, kStartReadySession, kWaitForDomain, kRestartWaitingDomain,
		kAdvanceWaitingSession, kRejectConfigurationMismatch, kRegisterSession}
	domainServiceProgress = []actionKind{kCreateTrustAnchor, kStartRuntimeSupervisor, kMountStateAnchor,
		kStartSidecar, kArmRuntimeCausalEdge, kStartSandbox, kPublishDomain, kBeginTeardown, kStopSandbox,
		kStopSidecar, kUnmountStateAnchor, kGracefulSupervisorExit, kFinishTeardown,
		kHostCoordinatorTerminateUnresponsiveRuntime, kLeaseTeardownStopSandbox, kLeaseTeardownStopSidecar,
		kLeaseTeardownUnmountStateAnchor, kLeaseTeardownSupervisorExit, kExternalReapStoppedSupervisorAfterHcLoss,
		kBootstrapRecoveryCoordinator, kBeginRecovery, kRecoverSandbox, kRecoverSidecar, kRecoverStateAnchor,
		kFinishRecovery}
	runtimePhysicalInterleaving = []actionKind{kHardLoseHostCoordinator, kHardLoseRuntimeSupervisor,
		kHardLoseAttachedRunsc, kStopHostCoordinatorProcess, kResumeHostCoordinatorProcess,
		kStopRuntimeSupervisorProcess, kResumeRuntimeSupervisorProcess, kStopAttachedRunscProcess,
		kResumeAttachedRunscProcess, kObservePathMismatch, kRefusePathMismatchCleanup}
	requestProgress = []actionKind{kAutoApprove, kQueuePrompt, kBeginPrompt, kDeveloperApprove, kDeveloperDeny,
		kStartHostExecution, kCompleteHostExecution, kTimeoutRequest, kCancelRequest, kFailHostExecution,
		kDeliverResult}
)

func (m *Model) instances() ([]instance, []check.Action, []string) {
	c := m.C
	var ins []instance
	var acts []check.Action
	var groups []string
	add := func(k actionKind, a, b, group int, args ...string) {
		if m.unfair(k) {
			group = -1
		}
		name := kindNames[k] + "("
		for i, x := range args {
			if i > 0 {
				name += ", "
			}
			name += x
		}
		ins = append(ins, instance{k, a, b})
		acts = append(acts, check.Action{Name: name + ")", Group: group})
	}
	for d := range c.Domains {
		groups = append(groups, "DomainServiceProgress("+c.Domains[d]+")")
	}
	for s := range c.Sessions {
		groups = append(groups, "SessionProgress("+c.Sessions[s]+")")
	}
	for r := range c.Requests {
		groups = append(groups, "RequestProgress("+c.Requests[r]+")")
	}
	nd, ns := len(c.Domains), len(c.Sessions)
	// Next == \/ \E s \in Sessions : ...
	for s := range c.Sessions {
		for _, k := range sessionProgress {
			add(k, s, 0, nd+s, c.Sessions[s])
		}
		add(kDisconnectSession, s, 0, -1, c.Sessions[s])
	}
	//         \/ \E d \in Domains : DomainServiceProgress(d) \/ FailDomain(d)
	for d := range c.Domains {
		for _, k := range domainServiceProgress {
			add(k, d, 0, d, c.Domains[d])
		}
		add(kFailDomain, d, 0, -1, c.Domains[d])
	}
	//         \/ \E d \in Domains : RuntimePhysicalInterleaving(d)
	for d := range c.Domains {
		for _, k := range runtimePhysicalInterleaving {
			add(k, d, 0, -1, c.Domains[d])
		}
	}
	//         \/ \E r \in Requests : ReceiveEscalation(r) \/ RequestProgress(r)
	for r := range c.Requests {
		add(kReceiveEscalation, r, 0, -1, c.Requests[r])
		for _, k := range requestProgress {
			if k == kDeveloperApprove {
				for cmd := range c.Commands {
					add(k, r, cmd, nd+ns+r, c.Requests[r], c.Commands[cmd])
				}
				continue
			}
			add(k, r, 0, nd+ns+r, c.Requests[r])
		}
	}
	return ins, acts, groups
}

// apply evaluates one action instance.
func (m *Model) apply(in instance, st *State) (State, bool) {
	a := in.a
	switch in.kind {
	case kStartNewDomain:
		return m.StartNewDomain(st, a)
	case kStartReadySession:
		return m.StartReadySession(st, a)
	case kWaitForDomain:
		return m.WaitForDomain(st, a)
	case kRestartWaitingDomain:
		return m.RestartWaitingDomain(st, a)
	case kAdvanceWaitingSession:
		return m.AdvanceWaitingSession(st, a)
	case kRejectConfigurationMismatch:
		return m.RejectConfigurationMismatch(st, a)
	case kRegisterSession:
		return m.RegisterSession(st, a)
	case kDisconnectSession:
		return m.DisconnectSession(st, a)
	case kCreateTrustAnchor:
		return m.CreateTrustAnchor(st, a)
	case kStartRuntimeSupervisor:
		return m.StartRuntimeSupervisor(st, a)
	case kMountStateAnchor:
		return m.MountStateAnchor(st, a)
	case kStartSidecar:
		return m.StartSidecar(st, a)
	case kArmRuntimeCausalEdge:
		return m.ArmRuntimeCausalEdge(st, a)
	case kStartSandbox:
		return m.StartSandbox(st, a)
	case kPublishDomain:
		return m.PublishDomain(st, a)
	case kBeginTeardown:
		return m.BeginTeardown(st, a)
	case kStopSandbox:
		return m.StopSandbox(st, a)
	case kStopSidecar:
		return m.StopSidecar(st, a)
	case kUnmountStateAnchor:
		return m.UnmountStateAnchor(st, a)
	case kGracefulSupervisorExit:
		return m.GracefulSupervisorExit(st, a)
	case kFinishTeardown:
		return m.FinishTeardown(st, a)
	case kHostCoordinatorTerminateUnresponsiveRuntime:
		return m.HostCoordinatorTerminateUnresponsiveRuntime(st, a)
	case kLeaseTeardownStopSandbox:
		return m.LeaseTeardownStopSandbox(st, a)
	case kLeaseTeardownStopSidecar:
		return m.LeaseTeardownStopSidecar(st, a)
	case kLeaseTeardownUnmountStateAnchor:
		return m.LeaseTeardownUnmountStateAnchor(st, a)
	case kLeaseTeardownSupervisorExit:
		return m.LeaseTeardownSupervisorExit(st, a)
	case kExternalReapStoppedSupervisorAfterHcLoss:
		return m.ExternalReapStoppedSupervisorAfterHcLoss(st, a)
	case kBootstrapRecoveryCoordinator:
		return m.BootstrapRecoveryCoordinator(st, a)
	case kBeginRecovery:
		return m.BeginRecovery(st, a)
	case kRecoverSandbox:
		return m.RecoverSandbox(st, a)
	case kRecoverSidecar:
		return m.RecoverSidecar(st, a)
	case kRecoverStateAnchor:
		return m.RecoverStateAnchor(st, a)
	case kFinishRecovery:
		return m.FinishRecovery(st, a)
	case kFailDomain:
		return m.FailDomain(st, a)
	case kHardLoseHostCoordinator:
		return m.HardLoseHostCoordinator(st, a)
	case kHardLoseRuntimeSupervisor:
		return m.HardLoseRuntimeSupervisor(st, a)
	case kHardLoseAttachedRunsc:
		return m.HardLoseAttachedRunsc(st, a)
	case kStopHostCoordinatorProcess:
		return m.StopHostCoordinatorProcess(st, a)
	case kResumeHostCoordinatorProcess:
		return m.ResumeHostCoordinatorProcess(st, a)
	case kStopRuntimeSupervisorProcess:
		return m.StopRuntimeSupervisorProcess(st, a)
	case kResumeRuntimeSupervisorProcess:
		return m.ResumeRuntimeSupervisorProcess(st, a)
	case kStopAttachedRunscProcess:
		return m.StopAttachedRunscProcess(st, a)
	case kResumeAttachedRunscProcess:
		return m.ResumeAttachedRunscProcess(st, a)
	case kObservePathMismatch:
		return m.ObservePathMismatch(st, a)
	case kRefusePathMismatchCleanup:
		return m.RefusePathMismatchCleanup(st, a)
	case kReceiveEscalation:
		return m.ReceiveEscalation(st, a)
	case kAutoApprove:
		return m.AutoApprove(st, a)
	case kQueuePrompt:
		return m.QueuePrompt(st, a)
	case kBeginPrompt:
		return m.BeginPrompt(st, a)
	case kDeveloperApprove:
		return m.DeveloperApprove(st, a, in.b)
	case kDeveloperDeny:
		return m.DeveloperDeny(st, a)
	case kStartHostExecution:
		return m.StartHostExecution(st, a)
	case kCompleteHostExecution:
		return m.CompleteHostExecution(st, a)
	case kTimeoutRequest:
		return m.TimeoutRequest(st, a)
	case kCancelRequest:
		return m.CancelRequest(st, a)
	case kFailHostExecution:
		return m.FailHostExecution(st, a)
	case kDeliverResult:
		return m.DeliverResult(st, a)
	}
	panic(fmt.Sprintf("lazaret: unknown action kind %d", in.kind))
}

// Init of Lazaret.tla.
func (m *Model) Init() State {
	var st State
	for d := range m.C.Domains {
		st.DomainPhase[d] = Absent
		st.StateAnchorState[d] = Unmounted
		st.SidecarState[d] = ResStopped
		st.SandboxState[d] = ResStopped
		st.TrustReady[d] = false
		st.LockOwner[d] = None
		st.Registered[d] = 0
		st.Connected[d] = 0
		st.DomainLockHeld[d] = false
		st.HostCoordinatorProc[d] = ProcAbsent
		st.RuntimeSupervisorProc[d] = ProcAbsent
		st.AttachedRunscProc[d] = ProcAbsent
		st.RuntimeCausalEdge[d] = Unarmed
		st.SupervisorLease[d] = LeaseUnarmed
		st.RuntimeFaultsRemaining[d] = uint8(m.C.InitRuntimeFaults)
		st.DomainGeneration[d] = 0
		st.DurableDecision[d] = DecNone
		st.DurableSandboxIntent[d] = false
		st.PathMismatch[d] = false
	}
	st.Published = 0
	for s := range m.C.Sessions {
		st.SessionPhase[s] = SNew
		st.TerminalRoute[s] = Detached
		st.ConnectionState[s] = Disconnected
		st.ActiveRequest[s] = None
	}
	for r := range m.C.Requests {
		st.RequestPhase[r] = Unused
		st.ApprovalSource[r] = NoApproval
		st.ApprovedCommand[r] = None
	}
	st.HostRunning = 0
	if m.mut(MutInitDomainRunning) {
		m.runningDomain(&st, 0)
	}
	return st
}

// Spec returns the checker's view of Spec == Init /\ [][Next]_vars /\ WF...
// with the invariants of Safety and the liveness properties.
func (m *Model) Spec() *check.Spec[State] {
	ins, acts, groups := m.instances()
	return &check.Spec[State]{
		Name:      "Lazaret(" + m.C.Name + ")",
		Actions:   acts,
		Fairness:  groups,
		StateSize: m.C.stateSize(),
		Init:      func(yield func(State)) { yield(m.Init()) },
		Next: func(st State, yield func(int, State)) {
			for i, in := range ins {
				t, ok := m.apply(in, &st)
				if !ok {
					continue
				}
				if h := m.havoc(in.kind); h != nil {
					h(t, func(u State) { yield(i, u) })
					continue
				}
				yield(i, t)
			}
		},
		Encode:     m.Encode,
		Decode:     m.Decode,
		Format:     m.Format,
		Invariants: m.Invariants(),
		Properties: m.Properties(),
	}
}
