package lazaret

// Model is a Lazaret.tla instance for one Config. Mutations, when set,
// inject named defects (see mutations.go); the zero set is the model.
type Model struct {
	C         *Config
	Mutations map[Mutation]bool

	reqMatch      []bool // RequestIdentityTupleMatches(r), constant
	approvalMatch []bool // ApprovalIdentityTupleMatches(r), constant
	roleSeparated []bool // Cardinality({coordinator, sidecar, sandbox}) = 3, per domain
	reqDomainMask []uint8
}

// New builds a model for c. It panics if c violates the module's ASSUME.
func New(c *Config) *Model {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	m := &Model{C: c}
	for r := range c.Requests {
		s := c.RequestSession[r]
		d := c.SessionDomain[s]
		m.reqMatch = append(m.reqMatch,
			c.RequestSandboxIdentity[r] == c.DomainSandboxIdentity[d] &&
				c.RequestCliIdentity[r] == c.SessionCliIdentity[s] &&
				c.RequestSessionAnchor[r] == c.SessionAnchorIdentity[s])
		m.approvalMatch = append(m.approvalMatch,
			c.ApprovalCliIdentity[r] == c.SessionCliIdentity[s] &&
				c.ApprovalSessionAnchor[r] == c.SessionAnchorIdentity[s] &&
				c.ApprovalSignatureValid[r])
	}
	for d := range c.Domains {
		a, b, x := c.DomainCoordinatorIdentity[d], c.DomainSidecarIdentity[d], c.DomainSandboxIdentity[d]
		m.roleSeparated = append(m.roleSeparated, a != b && b != x && a != x)
		var mask uint8
		for r := range c.Requests {
			if m.ReqDomain(r) == d {
				mask |= 1 << uint(r)
			}
		}
		m.reqDomainMask = append(m.reqDomainMask, mask)
	}
	return m
}

// mut reports whether the named defect is injected.
func (m *Model) mut(x Mutation) bool { return m.Mutations[x] }

func has(set uint8, i int) bool { return set&(1<<uint(i)) != 0 }

// Dom(s) == SessionDomain[s]
func (m *Model) Dom(s int) int { return m.C.SessionDomain[s] }

// ReqSession(r) == RequestSession[r]
func (m *Model) ReqSession(r int) int { return m.C.RequestSession[r] }

// ReqDomain(r) == Dom(ReqSession(r))
func (m *Model) ReqDomain(r int) int { return m.Dom(m.ReqSession(r)) }

// IsTerminalRequest(r) == requestPhase[r] \in TerminalRequestPhases
func IsTerminalRequest(st *State, r int) bool { return isTerminalPhase(st.RequestPhase[r]) }

func isTerminalPhase(p uint8) bool { return p >= Completed && p <= RFailed }

func isPendingPhase(p uint8) bool { return p >= CompletionPending && p <= FailurePending }

// DeliveredResultPhase(p)
func DeliveredResultPhase(p uint8) uint8 {
	switch p {
	case CompletionPending:
		return Completed
	case DenialPending:
		return Denied
	case TimeoutPending:
		return TimedOut
	case CancellationPending:
		return Cancelled
	case FailurePending:
		return RFailed
	}
	panic("DeliveredResultPhase: CASE with no matching arm")
}

// ProcessPresent(state) == state \in {"Alive", "Stopped"}
func ProcessPresent(p uint8) bool { return p == ProcAlive || p == ProcStopped }

// ProcessResponsive(state) == state = "Alive"
func ProcessResponsive(p uint8) bool { return p == ProcAlive }

func HostCoordinatorAlive(st *State, d int) bool   { return st.HostCoordinatorProc[d] == ProcAlive }
func HostCoordinatorPresent(st *State, d int) bool { return ProcessPresent(st.HostCoordinatorProc[d]) }
func RuntimeSupervisorAlive(st *State, d int) bool { return st.RuntimeSupervisorProc[d] == ProcAlive }

// RegistrationAdmissible(d)
func RegistrationAdmissible(st *State, d int) bool {
	return has(st.Published, d) && st.DomainPhase[d] == Ready && HostCoordinatorAlive(st, d)
}

// RuntimeLogicalAuthorityPresent(d)
func RuntimeLogicalAuthorityPresent(st *State, d int) bool {
	return HostCoordinatorPresent(st, d) || ProcessPresent(st.RuntimeSupervisorProc[d]) || ProcessPresent(st.AttachedRunscProc[d])
}

// SessionCoordinatorPresent(d) == RuntimeLogicalAuthorityPresent(d)
func SessionCoordinatorPresent(st *State, d int) bool { return RuntimeLogicalAuthorityPresent(st, d) }

// RuntimeAuthorityResponsive(d)
func RuntimeAuthorityResponsive(st *State, d int) bool {
	return ProcessResponsive(st.HostCoordinatorProc[d]) || ProcessResponsive(st.RuntimeSupervisorProc[d]) || ProcessResponsive(st.AttachedRunscProc[d])
}

// RuntimeGenerationAbsent(d)
func RuntimeGenerationAbsent(st *State, d int) bool {
	return !st.DomainLockHeld[d] &&
		st.HostCoordinatorProc[d] == ProcAbsent &&
		st.RuntimeSupervisorProc[d] == ProcAbsent &&
		st.AttachedRunscProc[d] == ProcAbsent &&
		st.RuntimeCausalEdge[d] == Unarmed &&
		st.SupervisorLease[d] == LeaseUnarmed
}

// ConsumeRuntimeFault(d): guard and update of runtimeFaultsRemaining.
func ConsumeRuntimeFault(st, t *State, d int) bool {
	if !(st.RuntimeFaultsRemaining[d] > 0) {
		return false
	}
	t.RuntimeFaultsRemaining[d] = st.RuntimeFaultsRemaining[d] - 1
	return true
}

// consumeRuntimeFault is ConsumeRuntimeFault(d) of the model, which a
// mutant may weaken (MutFaultBudgetUnchecked: the budget is decremented
// without its guard, so it wraps below zero).
func (m *Model) consumeRuntimeFault(st, t *State, d int) bool {
	if m.mut(MutFaultBudgetUnchecked) {
		t.RuntimeFaultsRemaining[d] = st.RuntimeFaultsRemaining[d] - 1
		return true
	}
	return ConsumeRuntimeFault(st, t, d)
}

// RuntimeIdentityTupleAuthorized(d)
func (m *Model) RuntimeIdentityTupleAuthorized(st *State, d int) bool {
	c := m.C
	return st.TrustReady[d] &&
		st.DomainPhase[d] == Ready &&
		has(st.Published, d) &&
		st.SidecarState[d] == ResReady &&
		st.SandboxState[d] == ResReady &&
		RuntimeLogicalAuthorityPresent(st, d) &&
		c.CoordinatorCertificateValid[d] &&
		c.SidecarCertificateValid[d] &&
		c.SandboxCertificateValid[d] &&
		m.roleSeparated[d]
}

// RuntimeIdentityTupleReady(d)
func (m *Model) RuntimeIdentityTupleReady(st *State, d int) bool {
	return m.RuntimeIdentityTupleAuthorized(st, d) && HostCoordinatorAlive(st, d) && RuntimeAuthorityResponsive(st, d)
}

// SessionIdentityTupleRegistered(s)
func (m *Model) SessionIdentityTupleRegistered(st *State, s int) bool {
	d := m.Dom(s)
	return has(st.Registered[d], s) && has(st.Connected[d], s) && m.C.CliCertificateValid[s]
}

// RequestIdentityTupleMatches(r) (depends on constants only)
func (m *Model) RequestIdentityTupleMatches(r int) bool { return m.reqMatch[r] }

// ApprovalIdentityTupleMatches(r) (depends on constants only; includes
// ApprovalSignatureValid[r], see tla/README.md reading R3)
func (m *Model) ApprovalIdentityTupleMatches(r int) bool { return m.approvalMatch[r] }

func interestedPhase(p uint8) bool { return p >= SWaiting && p <= SHostExecuting }

// Interested(d), as a set of sessions.
func (m *Model) Interested(st *State, d int) uint8 {
	var set uint8
	for s := range m.C.Sessions {
		if m.Dom(s) == d && interestedPhase(st.SessionPhase[s]) {
			set |= 1 << uint(s)
		}
	}
	return set
}

// RequestsForDomain(d), as a set of requests.
func (m *Model) RequestsForDomain(d int) uint8 { return m.reqDomainMask[d] }

// FailOpenSessionsAndRequests(d): writes the primed session and request
// variables of t from the unprimed values in st.
func (m *Model) FailOpenSessionsAndRequests(st, t *State, d int) {
	t.Registered[d] = 0
	t.Connected[d] = 0
	for s := range m.C.Sessions {
		if m.Dom(s) == d && st.SessionPhase[s] != SNew && st.SessionPhase[s] != SClosed {
			t.SessionPhase[s] = SFailed
		} else {
			t.SessionPhase[s] = st.SessionPhase[s]
		}
		if m.Dom(s) == d {
			t.TerminalRoute[s] = Detached
			t.ConnectionState[s] = Disconnected
			t.ActiveRequest[s] = None
		}
	}
	for r := range m.C.Requests {
		if m.ReqDomain(r) == d && st.RequestPhase[r] != Unused && !IsTerminalRequest(st, r) {
			t.RequestPhase[r] = RFailed
		}
	}
	t.HostRunning = st.HostRunning &^ m.RequestsForDomain(d)
}
