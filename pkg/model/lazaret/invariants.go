package lazaret

import "github.com/lazaret/lazaret/pkg/model/check"

// Invariants returns the conjuncts of Safety, in module order.
func (m *Model) Invariants() []check.Invariant[State] {
	type inv = check.Invariant[State]
	return []inv{
		{Name: "TypeOK", Holds: func(s State) bool { return m.TypeOK(&s) }},
		{Name: "ConfigurationConfinement", Holds: func(s State) bool { return m.ConfigurationConfinement(&s) }},
		{Name: "SandboxNamespaceIsolation", Holds: func(s State) bool { return m.SandboxNamespaceIsolation(&s) }},
		{Name: "OrderedNetworkStartup", Holds: func(s State) bool { return m.OrderedNetworkStartup(&s) }},
		{Name: "PublishedDomainsReady", Holds: func(s State) bool { return m.PublishedDomainsReady(&s) }},
		{Name: "DomainLockLifetime", Holds: func(s State) bool { return m.DomainLockLifetime(&s) }},
		{Name: "RuntimeCausalEdgeArmedBeforeSandbox", Holds: func(s State) bool { return m.RuntimeCausalEdgeArmedBeforeSandbox(&s) }},
		{Name: "RuntimeCausalEdgeOwnerPresent", Holds: func(s State) bool { return m.RuntimeCausalEdgeOwnerPresent(&s) }},
		{Name: "SandboxRunningImpliesCoordinatorPresent", Holds: func(s State) bool { return m.SandboxRunningImpliesCoordinatorPresent(&s) }},
		{Name: "PublishedRuntimeAuthorityPresent", Holds: func(s State) bool { return m.PublishedRuntimeAuthorityPresent(&s) }},
		{Name: "SupervisorLeaseConsistency", Holds: func(s State) bool { return m.SupervisorLeaseConsistency(&s) }},
		{Name: "RuntimeResourceOwnership", Holds: func(s State) bool { return m.RuntimeResourceOwnership(&s) }},
		{Name: "CoordinatorPhysicalConsistency", Holds: func(s State) bool { return m.CoordinatorPhysicalConsistency(&s) }},
		{Name: "NoVanishPresentRuntime", Holds: func(s State) bool { return m.NoVanishPresentRuntime(&s) }},
		{Name: "OrderedLeaseTeardown", Holds: func(s State) bool { return m.OrderedLeaseTeardown(&s) }},
		{Name: "DomainGenerationBounds", Holds: func(s State) bool { return m.DomainGenerationBounds(&s) }},
		{Name: "DurableIntentBeforeSandboxReady", Holds: func(s State) bool { return m.DurableIntentBeforeSandboxReady(&s) }},
		{Name: "DurableDecisionPublicationConsistent", Holds: func(s State) bool { return m.DurableDecisionPublicationConsistent(&s) }},
		{Name: "PathMismatchNotAdopted", Holds: func(s State) bool { return m.PathMismatchNotAdopted(&s) }},
		{Name: "ExclusiveBootstrapOwnership", Holds: func(s State) bool { return m.ExclusiveBootstrapOwnership(&s) }},
		{Name: "TeardownNotJoinable", Holds: func(s State) bool { return m.TeardownNotJoinable(&s) }},
		{Name: "RegisteredSessionsConnected", Holds: func(s State) bool { return m.RegisteredSessionsConnected(&s) }},
		{Name: "AttachedSessionsValid", Holds: func(s State) bool { return m.AttachedSessionsValid(&s) }},
		{Name: "AuthenticatedRequestsOnly", Holds: func(s State) bool { return m.AuthenticatedRequestsOnly(&s) }},
		{Name: "RuntimeRoleIdentitySeparation", Holds: func(s State) bool { return m.RuntimeRoleIdentitySeparation(&s) }},
		{Name: "RegisteredSessionIdentityUniqueness", Holds: func(s State) bool { return m.RegisteredSessionIdentityUniqueness(&s) }},
		{Name: "LiveRequestIdentityAuthorized", Holds: func(s State) bool { return m.LiveRequestIdentityAuthorized(&s) }},
		{Name: "DeveloperApprovalAuthenticated", Holds: func(s State) bool { return m.DeveloperApprovalAuthenticated(&s) }},
		{Name: "HostExecutionAuthorized", Holds: func(s State) bool { return m.HostExecutionAuthorized(&s) }},
		{Name: "AutoApprovalNoShell", Holds: func(s State) bool { return m.AutoApprovalNoShell(&s) }},
		{Name: "TerminalIsolation", Holds: func(s State) bool { return m.TerminalIsolation(&s) }},
		{Name: "NoOrphanHostProcess", Holds: func(s State) bool { return m.NoOrphanHostProcess(&s) }},
		{Name: "StateAnchorOwnership", Holds: func(s State) bool { return m.StateAnchorOwnership(&s) }},
		{Name: "FailedDomainIsolation", Holds: func(s State) bool { return m.FailedDomainIsolation(&s) }},
		{Name: "OrderedFailureRecovery", Holds: func(s State) bool { return m.OrderedFailureRecovery(&s) }},
		{Name: "ResultDeliveryStateConsistent", Holds: func(s State) bool { return m.ResultDeliveryStateConsistent(&s) }},
	}
}

func (m *Model) TypeOK(st *State) bool {
	c := m.C
	nd, ns, nr, nc := len(c.Domains), len(c.Sessions), len(c.Requests), len(c.Commands)
	dmask, smask, rmask := uint8(1<<uint(nd)-1), uint8(1<<uint(ns)-1), uint8(1<<uint(nr)-1)
	for d := 0; d < nd; d++ {
		if st.DomainPhase[d] > Recovering || st.StateAnchorState[d] > Mounted || st.SidecarState[d] > ResFailed ||
			st.SandboxState[d] > ResFailed || (st.LockOwner[d] != None && int(st.LockOwner[d]) >= ns) ||
			st.Registered[d]&^smask != 0 || st.Connected[d]&^smask != 0 ||
			st.HostCoordinatorProc[d] > ProcDead || st.RuntimeSupervisorProc[d] > ProcDead ||
			st.AttachedRunscProc[d] > ProcDead || st.RuntimeCausalEdge[d] > Armed ||
			st.SupervisorLease[d] > LeaseLost || st.RuntimeFaultsRemaining[d] > 2 ||
			int(st.DomainGeneration[d]) > c.MaxDomainGeneration || st.DurableDecision[d] > DecClean {
			return false
		}
	}
	if st.Published&^dmask != 0 || st.HostRunning&^rmask != 0 {
		return false
	}
	for s := 0; s < ns; s++ {
		if st.SessionPhase[s] > SFailed || st.TerminalRoute[s] > HostProcess || st.ConnectionState[s] > Connected ||
			(st.ActiveRequest[s] != None && int(st.ActiveRequest[s]) >= nr) {
			return false
		}
	}
	for r := 0; r < nr; r++ {
		if st.RequestPhase[r] > RFailed || st.ApprovalSource[r] > Developer ||
			(st.ApprovedCommand[r] != None && int(st.ApprovedCommand[r]) >= nc) {
			return false
		}
	}
	return true
}

func (m *Model) ConfigurationConfinement(st *State) bool {
	for d := range m.C.Domains {
		if st.DomainPhase[d] != Absent && !m.C.ConfigSafe[d] {
			return false
		}
	}
	return true
}

func (m *Model) SandboxNamespaceIsolation(st *State) bool {
	for d := range m.C.Domains {
		if st.SandboxState[d] == ResReady && !m.C.SandboxIsolationSafe[d] {
			return false
		}
	}
	return true
}

func (m *Model) OrderedNetworkStartup(st *State) bool {
	for d := range m.C.Domains {
		if st.SandboxState[d] == ResReady && st.SidecarState[d] != ResReady {
			return false
		}
	}
	return true
}

// PublishedDomainsReady, with the nested disjunction read as
// (RuntimeSupervisorAlive(d) \/ runtimeSupervisorProc[d] = "Stopped"); see
// tla/README.md reading R1.
func (m *Model) PublishedDomainsReady(st *State) bool {
	for d := range m.C.Domains {
		if !has(st.Published, d) {
			continue
		}
		if !(st.DomainPhase[d] == Ready &&
			HostCoordinatorPresent(st, d) &&
			(RuntimeSupervisorAlive(st, d) || st.RuntimeSupervisorProc[d] == ProcStopped) &&
			st.StateAnchorState[d] == Mounted &&
			st.SidecarState[d] == ResReady &&
			st.SandboxState[d] == ResReady &&
			st.TrustReady[d] &&
			st.SupervisorLease[d] == LeaseHeld) {
			return false
		}
	}
	return true
}

func (m *Model) DomainLockLifetime(st *State) bool {
	for d := range m.C.Domains {
		if st.DomainPhase[d] == Absent && st.DomainLockHeld[d] {
			return false
		}
		if st.DomainPhase[d] != Absent && !st.DomainLockHeld[d] {
			return false
		}
		if !st.DomainLockHeld[d] && !RuntimeGenerationAbsent(st, d) {
			return false
		}
	}
	return true
}

func (m *Model) RuntimeCausalEdgeArmedBeforeSandbox(st *State) bool {
	for d := range m.C.Domains {
		if st.SandboxState[d] == ResReady && !(st.RuntimeCausalEdge[d] == Armed && ProcessPresent(st.AttachedRunscProc[d])) {
			return false
		}
	}
	return true
}

func (m *Model) RuntimeCausalEdgeOwnerPresent(st *State) bool {
	for d := range m.C.Domains {
		if st.RuntimeCausalEdge[d] == Armed && !(st.DomainLockHeld[d] &&
			ProcessPresent(st.RuntimeSupervisorProc[d]) &&
			(st.SupervisorLease[d] == LeaseHeld || st.SupervisorLease[d] == LeaseLost)) {
			return false
		}
	}
	return true
}

func (m *Model) SandboxRunningImpliesCoordinatorPresent(st *State) bool {
	for d := range m.C.Domains {
		if st.SandboxState[d] == ResReady && !SessionCoordinatorPresent(st, d) {
			return false
		}
	}
	return true
}

func (m *Model) PublishedRuntimeAuthorityPresent(st *State) bool {
	for d := range m.C.Domains {
		if has(st.Published, d) && !(SessionCoordinatorPresent(st, d) && HostCoordinatorPresent(st, d)) {
			return false
		}
	}
	return true
}

func (m *Model) SupervisorLeaseConsistency(st *State) bool {
	for d := range m.C.Domains {
		rsPresent := ProcessPresent(st.RuntimeSupervisorProc[d])
		switch st.SupervisorLease[d] {
		case LeaseUnarmed:
			if rsPresent {
				return false
			}
		case LeaseHeld:
			if !(HostCoordinatorPresent(st, d) && rsPresent) {
				return false
			}
		case LeaseLost:
			if !(st.HostCoordinatorProc[d] == ProcDead && rsPresent) {
				return false
			}
		}
		if rsPresent && !(st.SupervisorLease[d] == LeaseHeld || st.SupervisorLease[d] == LeaseLost) {
			return false
		}
	}
	return true
}

func (m *Model) RuntimeResourceOwnership(st *State) bool {
	for d := range m.C.Domains {
		p := st.DomainPhase[d]
		if !(p == Starting || p == Ready || p == Stopping) {
			continue
		}
		rs := ProcessPresent(st.RuntimeSupervisorProc[d])
		if st.StateAnchorState[d] == Mounted && !rs {
			return false
		}
		if st.SidecarState[d] == ResReady && !rs {
			return false
		}
		if st.SandboxState[d] == ResReady && !(rs && st.SupervisorLease[d] == LeaseHeld) {
			return false
		}
	}
	return true
}

func (m *Model) CoordinatorPhysicalConsistency(st *State) bool {
	for d := range m.C.Domains {
		p := st.DomainPhase[d]
		if (p == Absent) != (st.HostCoordinatorProc[d] == ProcAbsent) {
			return false
		}
		if (p == Starting || p == Ready || p == Stopping) && !HostCoordinatorPresent(st, d) {
			return false
		}
		if p == Recovering && !HostCoordinatorAlive(st, d) {
			return false
		}
		if st.HostCoordinatorProc[d] == ProcDead && p != Failed {
			return false
		}
	}
	return true
}

func (m *Model) ExclusiveBootstrapOwnership(st *State) bool {
	for d := range m.C.Domains {
		o := st.LockOwner[d]
		if o != None && !(st.DomainPhase[d] == Starting && st.SessionPhase[o] == SWaiting) {
			return false
		}
	}
	return true
}

func (m *Model) TeardownNotJoinable(st *State) bool {
	for d := range m.C.Domains {
		p := st.DomainPhase[d]
		if (p == Stopping || p == Failed || p == Recovering) &&
			!(!has(st.Published, d) && st.Registered[d] == 0 && st.Connected[d] == 0) {
			return false
		}
	}
	return true
}

func (m *Model) RegisteredSessionsConnected(st *State) bool {
	for d := range m.C.Domains {
		if st.Registered[d]&^st.Connected[d] != 0 {
			return false
		}
	}
	return true
}

func (m *Model) AttachedSessionsValid(st *State) bool {
	for s := range m.C.Sessions {
		p := st.SessionPhase[s]
		if !(p == SAttached || p == SPrompting || p == SHostExecuting) {
			continue
		}
		d := m.Dom(s)
		if !(has(st.Registered[d], s) && has(st.Connected[d], s) && st.DomainPhase[d] == Ready &&
			m.C.SessionFingerprint[s] == m.C.DomainFingerprint[d]) {
			return false
		}
	}
	return true
}

func (m *Model) AuthenticatedRequestsOnly(st *State) bool {
	for r := range m.C.Requests {
		if st.RequestPhase[r] != Unused &&
			!(m.C.RequestCredentialValid[r] && m.C.RequestSignatureValid[r] && m.RequestIdentityTupleMatches(r)) {
			return false
		}
	}
	return true
}

func (m *Model) RuntimeRoleIdentitySeparation(st *State) bool {
	c := m.C
	for d := range c.Domains {
		if !m.roleSeparated[d] {
			return false
		}
	}
	for s := range c.Sessions {
		d := m.Dom(s)
		id := c.SessionCliIdentity[s]
		if id == c.DomainCoordinatorIdentity[d] || id == c.DomainSidecarIdentity[d] || id == c.DomainSandboxIdentity[d] {
			return false
		}
	}
	return true
}

func (m *Model) RegisteredSessionIdentityUniqueness(st *State) bool {
	c := m.C
	for s1 := range c.Sessions {
		for s2 := range c.Sessions {
			if s1 != s2 && has(st.Registered[m.Dom(s1)], s1) && has(st.Registered[m.Dom(s2)], s2) &&
				!(c.SessionCliIdentity[s1] != c.SessionCliIdentity[s2] &&
					c.SessionAnchorIdentity[s1] != c.SessionAnchorIdentity[s2]) {
				return false
			}
		}
	}
	return true
}

func (m *Model) LiveRequestIdentityAuthorized(st *State) bool {
	for r := range m.C.Requests {
		p := st.RequestPhase[r]
		if p == Unused || isTerminalPhase(p) {
			continue
		}
		if !(m.RuntimeIdentityTupleAuthorized(st, m.ReqDomain(r)) && m.SessionIdentityTupleRegistered(st, m.ReqSession(r))) {
			return false
		}
	}
	return true
}

func (m *Model) DeveloperApprovalAuthenticated(st *State) bool {
	c := m.C
	for r := range c.Requests {
		if st.ApprovalSource[r] != Developer {
			continue
		}
		s := m.ReqSession(r)
		if !(c.ApprovalCliIdentity[r] == c.SessionCliIdentity[s] &&
			c.ApprovalSessionAnchor[r] == c.SessionAnchorIdentity[s] &&
			c.ApprovalSignatureValid[r] &&
			int(st.ApprovedCommand[r]) == c.ApprovalCommand[r]) {
			return false
		}
	}
	return true
}

func (m *Model) HostExecutionAuthorized(st *State) bool {
	for r := range m.C.Requests {
		if !has(st.HostRunning, r) {
			continue
		}
		cmd := st.ApprovedCommand[r]
		if !(st.RequestPhase[r] == Executing &&
			(st.ApprovalSource[r] == AutoRule || st.ApprovalSource[r] == Developer) &&
			cmd != None && int(cmd) < len(m.C.Commands) &&
			m.C.CommandContentSafe[cmd] &&
			HostCoordinatorPresent(st, m.ReqDomain(r))) {
			return false
		}
	}
	return true
}

func (m *Model) AutoApprovalNoShell(st *State) bool {
	for r := range m.C.Requests {
		if st.ApprovalSource[r] != AutoRule {
			continue
		}
		cmd := st.ApprovedCommand[r]
		if !(int(cmd) == m.C.RequestCommand[r] && !m.C.CommandRequiresShell[cmd]) {
			return false
		}
	}
	return true
}

func (m *Model) TerminalIsolation(st *State) bool {
	for s := range m.C.Sessions {
		if st.SessionPhase[s] == SPrompting && st.TerminalRoute[s] != Prompt {
			return false
		}
	}
	return true
}

func (m *Model) NoOrphanHostProcess(st *State) bool {
	for r := range m.C.Requests {
		if !has(st.HostRunning, r) {
			continue
		}
		s := m.ReqSession(r)
		if !(st.ActiveRequest[s] == uint8(r) && st.SessionPhase[s] == SHostExecuting && st.ConnectionState[s] == Connected) {
			return false
		}
	}
	return true
}

func (m *Model) StateAnchorOwnership(st *State) bool {
	for d := range m.C.Domains {
		if st.StateAnchorState[d] == Mounted && !(st.DomainPhase[d] != Absent && st.DomainLockHeld[d]) {
			return false
		}
	}
	return true
}

func (m *Model) FailedDomainIsolation(st *State) bool {
	for d := range m.C.Domains {
		p := st.DomainPhase[d]
		if (p == Failed || p == Recovering) &&
			!(!has(st.Published, d) && st.Registered[d] == 0 && st.Connected[d] == 0 && !st.TrustReady[d] &&
				st.HostRunning&m.RequestsForDomain(d) == 0) {
			return false
		}
	}
	return true
}

func (m *Model) OrderedFailureRecovery(st *State) bool {
	for d := range m.C.Domains {
		if st.DomainPhase[d] != Recovering {
			continue
		}
		runscGone := st.AttachedRunscProc[d] == ProcAbsent || st.AttachedRunscProc[d] == ProcDead
		if st.SidecarState[d] == ResStopped && !(st.SandboxState[d] == ResStopped && runscGone) {
			return false
		}
		if st.StateAnchorState[d] == Unmounted &&
			!(st.SandboxState[d] == ResStopped && runscGone && st.SidecarState[d] == ResStopped) {
			return false
		}
	}
	return true
}

func (m *Model) OrderedLeaseTeardown(st *State) bool {
	for d := range m.C.Domains {
		if !(st.DomainPhase[d] == Failed && st.SupervisorLease[d] == LeaseLost) {
			continue
		}
		if st.SidecarState[d] == ResStopped && st.SandboxState[d] != ResStopped {
			return false
		}
		if st.StateAnchorState[d] == Unmounted && !(st.SandboxState[d] == ResStopped && st.SidecarState[d] == ResStopped) {
			return false
		}
	}
	return true
}

func (m *Model) NoVanishPresentRuntime(st *State) bool {
	for d := range m.C.Domains {
		if st.RuntimeSupervisorProc[d] == ProcAbsent && st.SupervisorLease[d] != LeaseUnarmed {
			return false
		}
		if st.DomainPhase[d] == Recovering && !(HostCoordinatorAlive(st, d) &&
			st.SupervisorLease[d] == LeaseUnarmed &&
			!ProcessPresent(st.RuntimeSupervisorProc[d]) &&
			!ProcessPresent(st.AttachedRunscProc[d])) {
			return false
		}
	}
	return true
}

func (m *Model) DomainGenerationBounds(st *State) bool {
	for d := range m.C.Domains {
		if int(st.DomainGeneration[d]) > m.C.MaxDomainGeneration {
			return false
		}
		if st.DomainPhase[d] != Absent && st.DomainGeneration[d] == 0 {
			return false
		}
	}
	return true
}

func (m *Model) DurableIntentBeforeSandboxReady(st *State) bool {
	for d := range m.C.Domains {
		if st.SandboxState[d] == ResReady && !st.DurableSandboxIntent[d] {
			return false
		}
	}
	return true
}

func (m *Model) DurableDecisionPublicationConsistent(st *State) bool {
	for d := range m.C.Domains {
		if has(st.Published, d) && st.DurableDecision[d] != DecPublished {
			return false
		}
		if st.DurableDecision[d] == DecPublished && !st.DurableSandboxIntent[d] {
			return false
		}
	}
	return true
}

func (m *Model) PathMismatchNotAdopted(st *State) bool {
	for d := range m.C.Domains {
		if st.PathMismatch[d] && st.SandboxState[d] != ResStopped {
			return false
		}
	}
	return true
}

func (m *Model) ResultDeliveryStateConsistent(st *State) bool {
	for r := range m.C.Requests {
		p := st.RequestPhase[r]
		s := m.ReqSession(r)
		if isPendingPhase(p) && !(st.ActiveRequest[s] == uint8(r) && st.ConnectionState[s] == Connected &&
			st.SessionPhase[s] == SAttached && !has(st.HostRunning, r)) {
			return false
		}
		if isTerminalPhase(p) && !(st.ActiveRequest[s] != uint8(r) && !has(st.HostRunning, r)) {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------------
// Liveness properties

func (m *Model) hcStopped(d int) func(State) bool {
	return func(s State) bool { return s.HostCoordinatorProc[d] == ProcStopped }
}

func not(f func(State) bool) func(State) bool { return func(s State) bool { return !f(s) } }

// emptyDomain is the hypothesis of EmptyDomainEventuallyStops:
// Interested(d) = {} /\ HostCoordinatorAlive(d) /\ runtimeSupervisorProc[d]
// # "Stopped" /\ attachedRunscProc[d] # "Stopped".
func (m *Model) emptyDomain(d int) func(State) bool {
	return func(s State) bool {
		return m.Interested(&s, d) == 0 && HostCoordinatorAlive(&s, d) &&
			s.RuntimeSupervisorProc[d] != ProcStopped && s.AttachedRunscProc[d] != ProcStopped
	}
}

// Properties returns the liveness properties of Lazaret.tla, one per
// quantifier instance, plus EmptyDomainEventuallyStopsAlways (reading R6 in
// tla/README.md).
func (m *Model) Properties() []check.Property[State] {
	c := m.C
	var ps []check.Property[State]
	for s := range c.Sessions {
		d := m.Dom(s)
		ps = append(ps, check.Property[State]{
			Name:  "SessionEventuallyResolves[" + c.Sessions[s] + "]",
			Start: func(x State) bool { return x.SessionPhase[s] == SNew },
			Avoid: func(x State) bool {
				p := x.SessionPhase[s]
				return !(p == SAttached || p == SClosed || p == SFailed)
			},
			Recur: not(m.hcStopped(d)),
		})
	}
	for r := range c.Requests {
		d := m.ReqDomain(r)
		ps = append(ps, check.Property[State]{
			Name:  "RequestEventuallyResolves[" + c.Requests[r] + "]",
			Start: func(x State) bool { return x.RequestPhase[r] == Verified },
			Avoid: func(x State) bool { return !isTerminalPhase(x.RequestPhase[r]) },
			Recur: not(m.hcStopped(d)),
		})
	}
	for s := range c.Sessions {
		d := m.Dom(s)
		ps = append(ps, check.Property[State]{
			Name: "PromptEventuallyRestoresTerminal[" + c.Sessions[s] + "]",
			Start: func(x State) bool {
				return x.SessionPhase[s] == SPrompting || x.SessionPhase[s] == SHostExecuting
			},
			Avoid: func(x State) bool { return !(x.TerminalRoute[s] == Sandbox || x.TerminalRoute[s] == Detached) },
			Recur: not(m.hcStopped(d)),
		})
	}
	for d := range c.Domains {
		notAbsent := func(x State) bool { return x.DomainPhase[d] != Absent }
		e := m.emptyDomain(d)
		ps = append(ps, check.Property[State]{
			Name:  "EmptyDomainEventuallyStops[" + c.Domains[d] + "]",
			Avoid: notAbsent,
			Cycle: func(x State) bool { return e(x) && notAbsent(x) },
		})
	}
	for d := range c.Domains {
		ps = append(ps, check.Property[State]{
			Name:  "FailedDomainEventuallyRecovers[" + c.Domains[d] + "]",
			Start: func(x State) bool { return x.DomainPhase[d] == Failed },
			Avoid: func(x State) bool { return x.DomainPhase[d] != Absent },
			Recur: not(m.hcStopped(d)),
		})
	}
	for d := range c.Domains {
		e := m.emptyDomain(d)
		ps = append(ps, check.Property[State]{
			Name:  "EmptyDomainEventuallyStopsAlways[" + c.Domains[d] + "]",
			Start: func(State) bool { return true },
			Avoid: func(x State) bool { return e(x) && x.DomainPhase[d] != Absent },
		})
	}
	return ps
}
