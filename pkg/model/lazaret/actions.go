package lazaret

// Actions of Lazaret.tla, in module order. Each returns the successor and
// whether the action is enabled. The successor starts as a copy of the
// current state, so every variable an action does not assign is UNCHANGED,
// exactly as the action's UNCHANGED list states (mutations that "drop an
// UNCHANGED" havoc the variable instead; see mutations.go).

// ---------------------------------------------------------------------------
// Domain and Session lifecycle

func (m *Model) StartNewDomain(st *State, s int) (State, bool) {
	d := m.Dom(s)
	if !(st.SessionPhase[s] == SNew &&
		(m.C.ConfigSafe[d] || m.mut(MutStartUnsafeConfig)) &&
		st.DomainPhase[d] == Absent &&
		RuntimeGenerationAbsent(st, d) &&
		int(st.DomainGeneration[d]) < m.C.MaxDomainGeneration) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Starting
	if !m.mut(MutGenerationNotBumped) {
		t.DomainGeneration[d] = st.DomainGeneration[d] + 1
	}
	t.LockOwner[d] = uint8(s)
	t.DomainLockHeld[d] = true
	t.HostCoordinatorProc[d] = ProcAlive
	t.SessionPhase[s] = SWaiting
	t.DurableDecision[d] = DecNone
	t.DurableSandboxIntent[d] = false
	t.PathMismatch[d] = false
	return t, true
}

func (m *Model) StartReadySession(st *State, s int) (State, bool) {
	d := m.Dom(s)
	if !(st.SessionPhase[s] == SNew &&
		RegistrationAdmissible(st, d) &&
		m.C.SessionFingerprint[s] == m.C.DomainFingerprint[d]) {
		return State{}, false
	}
	t := *st
	t.SessionPhase[s] = SRegistering
	t.ConnectionState[s] = Connected
	return t, true
}

func (m *Model) WaitForDomain(st *State, s int) (State, bool) {
	d := m.Dom(s)
	if !(st.SessionPhase[s] == SNew &&
		(st.DomainPhase[d] == Starting || st.DomainPhase[d] == Stopping)) {
		return State{}, false
	}
	t := *st
	t.SessionPhase[s] = SWaiting
	return t, true
}

func (m *Model) RestartWaitingDomain(st *State, s int) (State, bool) {
	d := m.Dom(s)
	if !(st.SessionPhase[s] == SWaiting &&
		(m.C.ConfigSafe[d] || m.mut(MutStartUnsafeConfig)) &&
		st.DomainPhase[d] == Absent &&
		RuntimeGenerationAbsent(st, d) &&
		int(st.DomainGeneration[d]) < m.C.MaxDomainGeneration) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Starting
	t.DomainGeneration[d] = st.DomainGeneration[d] + 1
	t.LockOwner[d] = uint8(s)
	t.DomainLockHeld[d] = true
	t.HostCoordinatorProc[d] = ProcAlive
	t.DurableDecision[d] = DecNone
	t.DurableSandboxIntent[d] = false
	t.PathMismatch[d] = false
	return t, true
}

func (m *Model) CreateTrustAnchor(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Starting &&
		HostCoordinatorAlive(st, d) &&
		!st.TrustReady[d] &&
		m.C.CoordinatorCertificateValid[d]) {
		return State{}, false
	}
	t := *st
	t.TrustReady[d] = true
	return t, true
}

func (m *Model) StartRuntimeSupervisor(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Starting &&
		HostCoordinatorAlive(st, d) &&
		st.TrustReady[d] &&
		st.RuntimeSupervisorProc[d] == ProcAbsent &&
		st.SupervisorLease[d] == LeaseUnarmed) {
		return State{}, false
	}
	t := *st
	if !m.mut(MutLeaseBeforeSupervisorSpawn) {
		t.RuntimeSupervisorProc[d] = ProcAlive
	}
	t.SupervisorLease[d] = LeaseHeld
	return t, true
}

func (m *Model) MountStateAnchor(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Starting &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		st.StateAnchorState[d] == Unmounted) {
		return State{}, false
	}
	t := *st
	t.StateAnchorState[d] = Mounted
	return t, true
}

func (m *Model) StartSidecar(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Starting &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		st.StateAnchorState[d] == Mounted &&
		st.TrustReady[d] &&
		m.C.SidecarCertificateValid[d] &&
		st.SidecarState[d] == ResStopped) {
		return State{}, false
	}
	t := *st
	t.SidecarState[d] = ResReady
	return t, true
}

func (m *Model) ArmRuntimeCausalEdge(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Starting &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		st.StateAnchorState[d] == Mounted &&
		(st.SidecarState[d] == ResReady || m.mut(MutSandboxWithoutNetworkReadiness)) &&
		st.AttachedRunscProc[d] == ProcAbsent &&
		st.RuntimeCausalEdge[d] == Unarmed) {
		return State{}, false
	}
	t := *st
	t.RuntimeCausalEdge[d] = Armed
	return t, true
}

func (m *Model) StartSandbox(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Starting &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		(st.RuntimeCausalEdge[d] == Armed || m.mut(MutSandboxWithoutCausalEdge)) &&
		(st.SidecarState[d] == ResReady || m.mut(MutSandboxWithoutNetworkReadiness)) &&
		st.SandboxState[d] == ResStopped &&
		st.AttachedRunscProc[d] == ProcAbsent &&
		(m.C.SandboxIsolationSafe[d] || m.mut(MutSandboxUnsafeIsolation)) &&
		m.C.SandboxCertificateValid[d] &&
		!st.DurableSandboxIntent[d] &&
		!st.PathMismatch[d]) {
		return State{}, false
	}
	t := *st
	// Durable sandbox Intent is recorded with the generation document before
	// the external sandbox create completes (DR-M3 intent-before-create).
	if !m.mut(MutStartSandboxWithoutIntent) {
		t.DurableSandboxIntent[d] = true
	}
	t.DurableDecision[d] = DecPreparing
	t.SandboxState[d] = ResReady
	t.AttachedRunscProc[d] = ProcAlive
	return t, true
}

func (m *Model) PublishDomain(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Starting &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		st.StateAnchorState[d] == Mounted &&
		st.SidecarState[d] == ResReady &&
		st.SandboxState[d] == ResReady &&
		st.TrustReady[d] &&
		st.DurableSandboxIntent[d]) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Ready
	if !m.mut(MutPublishKeepsLockOwner) {
		t.LockOwner[d] = None
	}
	t.Published = st.Published | 1<<uint(d)
	if !m.mut(MutPublishKeepsDecision) {
		t.DurableDecision[d] = DecPublished
	}
	return t, true
}

func (m *Model) AdvanceWaitingSession(st *State, s int) (State, bool) {
	d := m.Dom(s)
	if !(st.SessionPhase[s] == SWaiting &&
		RegistrationAdmissible(st, d) &&
		m.C.SessionFingerprint[s] == m.C.DomainFingerprint[d]) {
		return State{}, false
	}
	t := *st
	t.SessionPhase[s] = SRegistering
	t.ConnectionState[s] = Connected
	return t, true
}

func (m *Model) RejectConfigurationMismatch(st *State, s int) (State, bool) {
	d := m.Dom(s)
	if !((st.SessionPhase[s] == SNew || st.SessionPhase[s] == SWaiting) &&
		(st.DomainPhase[d] == Starting || st.DomainPhase[d] == Ready || st.DomainPhase[d] == Stopping) &&
		st.LockOwner[d] != uint8(s) &&
		m.C.SessionFingerprint[s] != m.C.DomainFingerprint[d]) {
		return State{}, false
	}
	t := *st
	t.SessionPhase[s] = SFailed
	t.TerminalRoute[s] = Detached
	t.ConnectionState[s] = Disconnected
	return t, true
}

func (m *Model) RegisterSession(st *State, s int) (State, bool) {
	d := m.Dom(s)
	if !(st.SessionPhase[s] == SRegistering &&
		st.ConnectionState[s] == Connected &&
		RegistrationAdmissible(st, d) &&
		m.C.SessionFingerprint[s] == m.C.DomainFingerprint[d] &&
		m.C.CliCertificateValid[s]) {
		return State{}, false
	}
	t := *st
	t.Registered[d] = st.Registered[d] | 1<<uint(s)
	t.Connected[d] = st.Connected[d] | 1<<uint(s)
	t.SessionPhase[s] = SAttached
	t.TerminalRoute[s] = Sandbox
	return t, true
}

func (m *Model) DisconnectSession(st *State, s int) (State, bool) {
	d := m.Dom(s)
	r := st.ActiveRequest[s]
	leaderLost := st.LockOwner[d] == uint8(s) && st.DomainPhase[d] == Starting
	if !interestedPhase(st.SessionPhase[s]) {
		return State{}, false
	}
	t := *st
	if !m.mut(MutDisconnectKeepsRegistered) {
		t.Registered[d] = st.Registered[d] &^ (1 << uint(s))
	}
	t.Connected[d] = st.Connected[d] &^ (1 << uint(s))
	t.SessionPhase[s] = SClosed
	t.TerminalRoute[s] = Detached
	t.ConnectionState[s] = Disconnected
	t.ActiveRequest[s] = None
	if r != None && !IsTerminalRequest(st, int(r)) && !m.mut(MutDisconnectKeepsRequest) {
		t.RequestPhase[r] = Cancelled
	}
	if r != None && !m.mut(MutDisconnectKeepsHostProcess) {
		t.HostRunning = st.HostRunning &^ (1 << r)
	}
	if leaderLost {
		t.DomainPhase[d] = Failed
		t.TrustReady[d] = false
		t.LockOwner[d] = None
		t.Published = st.Published &^ (1 << uint(d))
	}
	return t, true
}

func (m *Model) BeginTeardown(st *State, d int) (State, bool) {
	if m.mut(MutNoTeardown) {
		return State{}, false
	}
	if !(st.DomainPhase[d] == Ready &&
		HostCoordinatorAlive(st, d) &&
		m.Interested(st, d) == 0 &&
		st.Registered[d] == 0 &&
		st.Connected[d] == 0) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Stopping
	if !m.mut(MutTeardownKeepsPublished) {
		t.Published = st.Published &^ (1 << uint(d))
	}
	return t, true
}

func (m *Model) StopSandbox(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Stopping &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		st.SandboxState[d] == ResReady &&
		(!m.mut(MutSwapStopSandboxSidecar) || st.SidecarState[d] == ResStopped)) {
		return State{}, false
	}
	t := *st
	t.SandboxState[d] = ResStopped
	t.AttachedRunscProc[d] = ProcAbsent
	t.RuntimeCausalEdge[d] = Unarmed
	return t, true
}

func (m *Model) StopSidecar(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Stopping &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		(st.SandboxState[d] == ResStopped || m.mut(MutSwapStopSandboxSidecar)) &&
		st.SidecarState[d] == ResReady) {
		return State{}, false
	}
	t := *st
	t.SidecarState[d] = ResStopped
	return t, true
}

func (m *Model) UnmountStateAnchor(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Stopping &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		st.SandboxState[d] == ResStopped &&
		st.SidecarState[d] == ResStopped &&
		st.StateAnchorState[d] == Mounted) {
		return State{}, false
	}
	t := *st
	t.StateAnchorState[d] = Unmounted
	return t, true
}

func (m *Model) GracefulSupervisorExit(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Stopping &&
		HostCoordinatorAlive(st, d) &&
		RuntimeSupervisorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseHeld &&
		st.SandboxState[d] == ResStopped &&
		st.SidecarState[d] == ResStopped &&
		(st.StateAnchorState[d] == Unmounted || m.mut(MutSupervisorExitWhileMounted)) &&
		st.AttachedRunscProc[d] == ProcAbsent &&
		st.RuntimeCausalEdge[d] == Unarmed) {
		return State{}, false
	}
	t := *st
	t.RuntimeSupervisorProc[d] = ProcDead
	t.SupervisorLease[d] = LeaseUnarmed
	return t, true
}

func (m *Model) FinishTeardown(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Stopping &&
		HostCoordinatorAlive(st, d) &&
		st.StateAnchorState[d] == Unmounted &&
		st.SidecarState[d] == ResStopped &&
		st.SandboxState[d] == ResStopped &&
		st.SupervisorLease[d] == LeaseUnarmed &&
		!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
		st.AttachedRunscProc[d] == ProcAbsent &&
		st.RuntimeCausalEdge[d] == Unarmed &&
		!st.PathMismatch[d]) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Absent
	t.TrustReady[d] = false
	t.LockOwner[d] = None
	if !m.mut(MutFinishTeardownKeepsLock) {
		t.DomainLockHeld[d] = false
	}
	t.HostCoordinatorProc[d] = ProcAbsent
	t.RuntimeSupervisorProc[d] = ProcAbsent
	t.AttachedRunscProc[d] = ProcAbsent
	t.RuntimeCausalEdge[d] = Unarmed
	t.SupervisorLease[d] = LeaseUnarmed
	t.DurableDecision[d] = DecClean
	t.DurableSandboxIntent[d] = false
	t.PathMismatch[d] = false
	return t, true
}

// ---------------------------------------------------------------------------
// Host escalation protocol

func (m *Model) ReceiveEscalation(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == Unused &&
		st.SessionPhase[s] == SAttached &&
		st.ActiveRequest[s] == None &&
		has(st.Registered[d], s) &&
		has(st.Connected[d], s) &&
		m.RuntimeIdentityTupleReady(st, d) &&
		m.SessionIdentityTupleRegistered(st, s) &&
		(m.RequestIdentityTupleMatches(r) || m.mut(MutReceiveUnmatchedIdentity)) &&
		m.C.RequestCredentialValid[r] &&
		m.C.RequestSignatureValid[r]) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = Verified
	t.ActiveRequest[s] = uint8(r)
	return t, true
}

func (m *Model) AutoApprove(st *State, r int) (State, bool) {
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == Verified &&
		HostCoordinatorAlive(st, d) &&
		m.C.AutoRuleMatches[r] &&
		(!m.C.CommandRequiresShell[m.C.RequestCommand[r]] || m.mut(MutAutoApproveShell))) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = Approved
	t.ApprovalSource[r] = AutoRule
	t.ApprovedCommand[r] = uint8(m.C.RequestCommand[r])
	return t, true
}

func (m *Model) QueuePrompt(st *State, r int) (State, bool) {
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == Verified &&
		HostCoordinatorAlive(st, d) &&
		!(m.C.AutoRuleMatches[r] && !m.C.CommandRequiresShell[m.C.RequestCommand[r]])) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = AwaitingApproval
	return t, true
}

func (m *Model) BeginPrompt(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == AwaitingApproval &&
		HostCoordinatorAlive(st, d) &&
		st.SessionPhase[s] == SAttached &&
		st.ActiveRequest[s] == uint8(r)) {
		return State{}, false
	}
	t := *st
	t.SessionPhase[s] = SPrompting
	if !m.mut(MutBeginPromptKeepsRoute) {
		t.TerminalRoute[s] = Prompt
	}
	return t, true
}

func (m *Model) DeveloperApprove(st *State, r, cmd int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == AwaitingApproval &&
		HostCoordinatorAlive(st, d) &&
		st.SessionPhase[s] == SPrompting &&
		m.ApprovalIdentityTupleMatches(r) &&
		cmd >= 0 && cmd < len(m.C.Commands) &&
		(cmd == m.C.ApprovalCommand[r] || m.mut(MutApproveAnyCommand))) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = Approved
	t.ApprovalSource[r] = Developer
	t.ApprovedCommand[r] = uint8(cmd)
	return t, true
}

func (m *Model) DeveloperDeny(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == AwaitingApproval &&
		HostCoordinatorAlive(st, d) &&
		st.SessionPhase[s] == SPrompting &&
		m.ApprovalIdentityTupleMatches(r)) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = DenialPending
	t.SessionPhase[s] = SAttached
	if !m.mut(MutDenyKeepsPromptRoute) {
		t.TerminalRoute[s] = Sandbox
	}
	return t, true
}

func (m *Model) StartHostExecution(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	if !((st.RequestPhase[r] == Approved ||
		(m.mut(MutHostExecutionWithoutApproval) && (st.RequestPhase[r] == Verified || st.RequestPhase[r] == AwaitingApproval))) &&
		HostCoordinatorAlive(st, d) &&
		st.ActiveRequest[s] == uint8(r) &&
		has(st.Connected[d], s) &&
		(st.SessionPhase[s] == SAttached || st.SessionPhase[s] == SPrompting) &&
		m.commandContentSafe(st.ApprovedCommand[r])) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = Executing
	t.SessionPhase[s] = SHostExecuting
	t.TerminalRoute[s] = HostProcess
	t.HostRunning = st.HostRunning | 1<<uint(r)
	return t, true
}

// commandContentSafe is CommandContentSafe[approvedCommand[r]]. TLC would
// report an error applying the function outside its domain (NoCommand); the
// transcription treats that as FALSE, which is only reachable in mutants.
func (m *Model) commandContentSafe(cmd uint8) bool {
	if cmd == None {
		return m.mut(MutHostExecutionWithoutApproval)
	}
	return m.C.CommandContentSafe[cmd]
}

func (m *Model) CompleteHostExecution(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == Executing &&
		HostCoordinatorAlive(st, d) &&
		has(st.HostRunning, r)) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = CompletionPending
	t.HostRunning = st.HostRunning &^ (1 << uint(r))
	t.SessionPhase[s] = SAttached
	t.TerminalRoute[s] = Sandbox
	return t, true
}

func (m *Model) TimeoutRequest(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	p := st.RequestPhase[r]
	if !((p == Verified || p == AwaitingApproval || p == Approved || p == Executing) &&
		HostCoordinatorAlive(st, d) &&
		st.ActiveRequest[s] == uint8(r)) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = TimeoutPending
	t.SessionPhase[s] = SAttached
	t.TerminalRoute[s] = Sandbox
	t.HostRunning = st.HostRunning &^ (1 << uint(r))
	return t, true
}

func (m *Model) CancelRequest(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	p := st.RequestPhase[r]
	if !((p == Verified || p == AwaitingApproval || p == Approved || p == Executing) &&
		HostCoordinatorAlive(st, d) &&
		st.ActiveRequest[s] == uint8(r) &&
		st.ConnectionState[s] == Connected) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = CancellationPending
	t.SessionPhase[s] = SAttached
	t.TerminalRoute[s] = Sandbox
	t.HostRunning = st.HostRunning &^ (1 << uint(r))
	return t, true
}

func (m *Model) FailHostExecution(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	if !(st.RequestPhase[r] == Executing &&
		HostCoordinatorAlive(st, d) &&
		st.ActiveRequest[s] == uint8(r) &&
		st.ConnectionState[s] == Connected) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = FailurePending
	t.SessionPhase[s] = SAttached
	t.TerminalRoute[s] = Sandbox
	t.HostRunning = st.HostRunning &^ (1 << uint(r))
	return t, true
}

func (m *Model) DeliverResult(st *State, r int) (State, bool) {
	s := m.ReqSession(r)
	d := m.ReqDomain(r)
	wantConn := Connected
	if m.mut(MutDeliverOnlyWhenDisconnected) {
		wantConn = Disconnected
	}
	if !(isPendingPhase(st.RequestPhase[r]) &&
		HostCoordinatorAlive(st, d) &&
		st.ActiveRequest[s] == uint8(r) &&
		st.ConnectionState[s] == wantConn &&
		st.SessionPhase[s] == SAttached) {
		return State{}, false
	}
	t := *st
	t.RequestPhase[r] = DeliveredResultPhase(st.RequestPhase[r])
	if !m.mut(MutDeliverKeepsActiveRequest) {
		t.ActiveRequest[s] = None
	}
	return t, true
}

// ---------------------------------------------------------------------------
// Failure, Host Coordinator lease loss, and recovery

func (m *Model) FailDomain(st *State, d int) (State, bool) {
	p := st.DomainPhase[d]
	if !(p == Starting || p == Ready || p == Stopping) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Failed
	if !m.mut(MutFailKeepsTrust) {
		t.TrustReady[d] = false
	}
	t.LockOwner[d] = None
	t.Published = st.Published &^ (1 << uint(d))
	if !m.mut(MutFailDomainKeepsSessions) {
		m.FailOpenSessionsAndRequests(st, &t, d)
	}
	return t, true
}

func (m *Model) HardLoseHostCoordinator(st *State, d int) (State, bool) {
	p := st.DomainPhase[d]
	if !((p == Starting || p == Ready || p == Stopping || p == Failed || p == Recovering) &&
		HostCoordinatorPresent(st, d)) {
		return State{}, false
	}
	t := *st
	if !m.consumeRuntimeFault(st, &t, d) {
		return State{}, false
	}
	t.DomainPhase[d] = Failed
	t.TrustReady[d] = false
	t.LockOwner[d] = None
	if !m.mut(MutHcLossKeepsPublished) {
		t.Published = st.Published &^ (1 << uint(d))
	}
	m.FailOpenSessionsAndRequests(st, &t, d)
	t.HostCoordinatorProc[d] = ProcDead
	if st.SupervisorLease[d] == LeaseHeld && !m.mut(MutHcLossKeepsLeaseHeld) {
		t.SupervisorLease[d] = LeaseLost
	}
	return t, true
}

func (m *Model) HardLoseRuntimeSupervisor(st *State, d int) (State, bool) {
	p := st.DomainPhase[d]
	if !((p == Starting || p == Ready || p == Stopping || p == Failed) &&
		ProcessPresent(st.RuntimeSupervisorProc[d])) {
		return State{}, false
	}
	t := *st
	if !m.consumeRuntimeFault(st, &t, d) {
		return State{}, false
	}
	t.DomainPhase[d] = Failed
	t.TrustReady[d] = false
	t.LockOwner[d] = None
	t.Published = st.Published &^ (1 << uint(d))
	m.FailOpenSessionsAndRequests(st, &t, d)
	t.RuntimeSupervisorProc[d] = ProcDead
	if st.RuntimeCausalEdge[d] == Armed && ProcessPresent(st.AttachedRunscProc[d]) {
		t.AttachedRunscProc[d] = ProcDead
	}
	if st.RuntimeCausalEdge[d] == Armed {
		t.SandboxState[d] = ResStopped
	}
	if !m.mut(MutRsLossKeepsCausalEdge) {
		t.RuntimeCausalEdge[d] = Unarmed
	}
	t.SupervisorLease[d] = LeaseUnarmed
	return t, true
}

func (m *Model) HardLoseAttachedRunsc(st *State, d int) (State, bool) {
	p := st.DomainPhase[d]
	if !((p == Starting || p == Ready || p == Stopping || p == Failed) &&
		ProcessPresent(st.AttachedRunscProc[d])) {
		return State{}, false
	}
	t := *st
	if !m.consumeRuntimeFault(st, &t, d) {
		return State{}, false
	}
	t.DomainPhase[d] = Failed
	t.TrustReady[d] = false
	t.LockOwner[d] = None
	t.Published = st.Published &^ (1 << uint(d))
	m.FailOpenSessionsAndRequests(st, &t, d)
	t.AttachedRunscProc[d] = ProcDead
	t.SandboxState[d] = ResStopped
	t.RuntimeCausalEdge[d] = Unarmed
	return t, true
}

func (m *Model) StopHostCoordinatorProcess(st *State, d int) (State, bool) {
	p := st.DomainPhase[d]
	if !((p == Starting || p == Ready || p == Stopping || p == Failed) &&
		st.HostCoordinatorProc[d] == ProcAlive) {
		return State{}, false
	}
	t := *st
	if !m.consumeRuntimeFault(st, &t, d) {
		return State{}, false
	}
	t.HostCoordinatorProc[d] = ProcStopped
	return t, true
}

func (m *Model) ResumeHostCoordinatorProcess(st *State, d int) (State, bool) {
	if !(st.HostCoordinatorProc[d] == ProcStopped) {
		return State{}, false
	}
	t := *st
	t.HostCoordinatorProc[d] = ProcAlive
	return t, true
}

func (m *Model) StopRuntimeSupervisorProcess(st *State, d int) (State, bool) {
	if !(st.RuntimeSupervisorProc[d] == ProcAlive) {
		return State{}, false
	}
	t := *st
	if !m.consumeRuntimeFault(st, &t, d) {
		return State{}, false
	}
	t.RuntimeSupervisorProc[d] = ProcStopped
	return t, true
}

func (m *Model) ResumeRuntimeSupervisorProcess(st *State, d int) (State, bool) {
	if !(st.RuntimeSupervisorProc[d] == ProcStopped) {
		return State{}, false
	}
	t := *st
	t.RuntimeSupervisorProc[d] = ProcAlive
	return t, true
}

func (m *Model) StopAttachedRunscProcess(st *State, d int) (State, bool) {
	if !(st.AttachedRunscProc[d] == ProcAlive) {
		return State{}, false
	}
	t := *st
	if !m.consumeRuntimeFault(st, &t, d) {
		return State{}, false
	}
	t.AttachedRunscProc[d] = ProcStopped
	return t, true
}

func (m *Model) ResumeAttachedRunscProcess(st *State, d int) (State, bool) {
	if !(st.AttachedRunscProc[d] == ProcStopped) {
		return State{}, false
	}
	t := *st
	t.AttachedRunscProc[d] = ProcAlive
	return t, true
}

// HostCoordinatorTerminateUnresponsiveRuntime: surviving Host Coordinator
// health kill of an unresponsive or leftover runtime.
func (m *Model) HostCoordinatorTerminateUnresponsiveRuntime(st *State, d int) (State, bool) {
	p := st.DomainPhase[d]
	if !((p == Starting || p == Ready || p == Stopping || p == Failed) &&
		HostCoordinatorAlive(st, d) &&
		(st.SupervisorLease[d] == LeaseHeld || st.SupervisorLease[d] == LeaseUnarmed) &&
		(st.RuntimeSupervisorProc[d] == ProcStopped ||
			st.AttachedRunscProc[d] == ProcStopped ||
			(p == Failed && (ProcessPresent(st.RuntimeSupervisorProc[d]) || ProcessPresent(st.AttachedRunscProc[d]))))) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Failed
	t.TrustReady[d] = false
	t.LockOwner[d] = None
	t.Published = st.Published &^ (1 << uint(d))
	m.FailOpenSessionsAndRequests(st, &t, d)
	if ProcessPresent(st.RuntimeSupervisorProc[d]) {
		t.RuntimeSupervisorProc[d] = ProcDead
	}
	if ProcessPresent(st.AttachedRunscProc[d]) {
		t.AttachedRunscProc[d] = ProcDead
	}
	t.SandboxState[d] = ResStopped
	t.RuntimeCausalEdge[d] = Unarmed
	t.SupervisorLease[d] = LeaseUnarmed
	return t, true
}

// Ordered Runtime Supervisor teardown after Host Coordinator hard loss.

func (m *Model) LeaseTeardownStopSandbox(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Failed &&
		st.SupervisorLease[d] == LeaseLost &&
		RuntimeSupervisorAlive(st, d) &&
		st.SandboxState[d] == ResReady) {
		return State{}, false
	}
	t := *st
	t.SandboxState[d] = ResStopped
	if ProcessPresent(st.AttachedRunscProc[d]) {
		t.AttachedRunscProc[d] = ProcDead
	} else {
		t.AttachedRunscProc[d] = ProcAbsent
	}
	t.RuntimeCausalEdge[d] = Unarmed
	return t, true
}

func (m *Model) LeaseTeardownStopSidecar(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Failed &&
		st.SupervisorLease[d] == LeaseLost &&
		RuntimeSupervisorAlive(st, d) &&
		(st.SandboxState[d] == ResStopped || m.mut(MutLeaseTeardownSidecarFirst)) &&
		st.SidecarState[d] == ResReady) {
		return State{}, false
	}
	t := *st
	t.SidecarState[d] = ResStopped
	return t, true
}

func (m *Model) LeaseTeardownUnmountStateAnchor(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Failed &&
		st.SupervisorLease[d] == LeaseLost &&
		RuntimeSupervisorAlive(st, d) &&
		st.SandboxState[d] == ResStopped &&
		st.SidecarState[d] == ResStopped &&
		st.StateAnchorState[d] == Mounted) {
		return State{}, false
	}
	t := *st
	t.StateAnchorState[d] = Unmounted
	return t, true
}

func (m *Model) LeaseTeardownSupervisorExit(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Failed &&
		st.SupervisorLease[d] == LeaseLost &&
		RuntimeSupervisorAlive(st, d) &&
		st.SandboxState[d] == ResStopped &&
		st.SidecarState[d] == ResStopped &&
		st.StateAnchorState[d] == Unmounted) {
		return State{}, false
	}
	t := *st
	t.RuntimeSupervisorProc[d] = ProcDead
	if st.AttachedRunscProc[d] == ProcAlive || st.AttachedRunscProc[d] == ProcStopped {
		t.AttachedRunscProc[d] = ProcDead
	}
	t.RuntimeCausalEdge[d] = Unarmed
	t.SupervisorLease[d] = LeaseUnarmed
	return t, true
}

// ExternalReapStoppedSupervisorAfterHcLoss: after HC hard loss a stopped
// RS cannot run userspace lease teardown; an external reaper may kill it and
// apply the causal edge. It does not clear sidecar or State Anchor.
func (m *Model) ExternalReapStoppedSupervisorAfterHcLoss(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Failed &&
		st.SupervisorLease[d] == LeaseLost &&
		st.RuntimeSupervisorProc[d] == ProcStopped) {
		return State{}, false
	}
	t := *st
	t.RuntimeSupervisorProc[d] = ProcDead
	if ProcessPresent(st.AttachedRunscProc[d]) {
		t.AttachedRunscProc[d] = ProcDead
	}
	if (st.RuntimeCausalEdge[d] == Armed || st.SandboxState[d] == ResReady) && !m.mut(MutReapKeepsSandbox) {
		t.SandboxState[d] = ResStopped
	}
	t.RuntimeCausalEdge[d] = Unarmed
	t.SupervisorLease[d] = LeaseUnarmed
	return t, true
}

// BootstrapRecoveryCoordinator: new recovery principal after total HC hard
// loss and runtime reaps.
func (m *Model) BootstrapRecoveryCoordinator(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Failed &&
		st.HostCoordinatorProc[d] == ProcDead &&
		st.SupervisorLease[d] == LeaseUnarmed &&
		!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
		!ProcessPresent(st.AttachedRunscProc[d]) &&
		st.RuntimeCausalEdge[d] == Unarmed &&
		st.Registered[d] == 0 &&
		st.Connected[d] == 0 &&
		st.HostRunning&m.RequestsForDomain(d) == 0) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Recovering
	t.DomainLockHeld[d] = true
	if !m.mut(MutBootstrapKeepsDeadHc) {
		t.HostCoordinatorProc[d] = ProcAlive
	}
	return t, true
}

func (m *Model) BeginRecovery(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Failed &&
		HostCoordinatorAlive(st, d) &&
		st.SupervisorLease[d] == LeaseUnarmed &&
		!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
		!ProcessPresent(st.AttachedRunscProc[d]) &&
		st.RuntimeCausalEdge[d] == Unarmed &&
		st.Registered[d] == 0 &&
		st.Connected[d] == 0 &&
		st.HostRunning&m.RequestsForDomain(d) == 0) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Recovering
	t.DomainLockHeld[d] = true
	return t, true
}

func (m *Model) RecoverSandbox(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Recovering &&
		HostCoordinatorAlive(st, d) &&
		st.RuntimeCausalEdge[d] == Unarmed &&
		!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
		!ProcessPresent(st.AttachedRunscProc[d]) &&
		!st.PathMismatch[d] &&
		(st.SandboxState[d] != ResStopped || st.AttachedRunscProc[d] == ProcDead) &&
		// Exact-owned Ready sandbox cleanup requires durable intent (DR-M3).
		(st.SandboxState[d] == ResStopped || st.DurableSandboxIntent[d])) {
		return State{}, false
	}
	t := *st
	t.SandboxState[d] = ResStopped
	t.AttachedRunscProc[d] = ProcAbsent
	return t, true
}

func (m *Model) RecoverSidecar(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Recovering &&
		HostCoordinatorAlive(st, d) &&
		st.SandboxState[d] == ResStopped &&
		st.AttachedRunscProc[d] == ProcAbsent &&
		st.RuntimeCausalEdge[d] == Unarmed &&
		!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
		st.SidecarState[d] != ResStopped) {
		return State{}, false
	}
	t := *st
	t.SidecarState[d] = ResStopped
	return t, true
}

func (m *Model) RecoverStateAnchor(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Recovering &&
		HostCoordinatorAlive(st, d) &&
		st.SandboxState[d] == ResStopped &&
		st.AttachedRunscProc[d] == ProcAbsent &&
		st.RuntimeCausalEdge[d] == Unarmed &&
		!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
		(st.SidecarState[d] == ResStopped || m.mut(MutRecoverAnchorBeforeSidecar)) &&
		st.StateAnchorState[d] == Mounted) {
		return State{}, false
	}
	t := *st
	t.StateAnchorState[d] = Unmounted
	return t, true
}

func (m *Model) FinishRecovery(st *State, d int) (State, bool) {
	if !(st.DomainPhase[d] == Recovering &&
		HostCoordinatorAlive(st, d) &&
		(st.StateAnchorState[d] == Unmounted || m.mut(MutFinishRecoveryWhileMounted)) &&
		st.SidecarState[d] == ResStopped &&
		st.SandboxState[d] == ResStopped &&
		(st.AttachedRunscProc[d] == ProcAbsent || st.AttachedRunscProc[d] == ProcDead) &&
		(st.RuntimeSupervisorProc[d] == ProcAbsent || st.RuntimeSupervisorProc[d] == ProcDead) &&
		!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
		!ProcessPresent(st.AttachedRunscProc[d]) &&
		st.SupervisorLease[d] == LeaseUnarmed &&
		st.RuntimeCausalEdge[d] == Unarmed) {
		return State{}, false
	}
	t := *st
	t.DomainPhase[d] = Absent
	t.LockOwner[d] = None
	t.TrustReady[d] = false
	t.DomainLockHeld[d] = false
	t.HostCoordinatorProc[d] = ProcAbsent
	t.RuntimeSupervisorProc[d] = ProcAbsent
	t.AttachedRunscProc[d] = ProcAbsent
	t.RuntimeCausalEdge[d] = Unarmed
	t.SupervisorLease[d] = LeaseUnarmed
	t.DurableDecision[d] = DecClean
	t.DurableSandboxIntent[d] = false
	// Drop generation-document observation of path leftovers; physical
	// foreign leftovers remain outside the model (SC6 unpublished leftovers).
	t.PathMismatch[d] = false
	return t, true
}

// ---------------------------------------------------------------------------
// Durable generation document / mismatch refuse (DR-M3 / FM4 abstract)

func (m *Model) ObservePathMismatch(st *State, d int) (State, bool) {
	if !((st.DomainPhase[d] == Failed || st.DomainPhase[d] == Recovering) &&
		((st.SandboxState[d] == ResStopped && st.AttachedRunscProc[d] == ProcAbsent) || m.mut(MutObserveMismatchWhileRunning)) &&
		!st.PathMismatch[d]) {
		return State{}, false
	}
	t := *st
	t.PathMismatch[d] = true
	return t, true
}

// RefusePathMismatchCleanup: wrong-owner / missing-intent refuse: fail
// closed, do not delete or adopt (UNCHANGED vars: a stuttering step).
func (m *Model) RefusePathMismatchCleanup(st *State, d int) (State, bool) {
	if !((st.DomainPhase[d] == Failed || st.DomainPhase[d] == Recovering) &&
		HostCoordinatorAlive(st, d) &&
		st.PathMismatch[d]) {
		return State{}, false
	}
	return *st, true
}
