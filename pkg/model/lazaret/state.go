// Package lazaret is the Go transcription of tla/Lazaret.tla, the
// application-wide protocol model: Domain startup under the multi-process
// Session Coordinator (Host Coordinator, Runtime Supervisor, attached
// runsc), ordered resource preparation, the Host Coordinator lifetime lease,
// identity tuples, Client Session registration, host escalation, result
// delivery, terminal routing, failure, lease-driven teardown, recovery and
// the abstract durable generation document.
//
// Every TLA+ action is a method of Model with the same name, written in the
// same order and with the same conjuncts as the .tla, so the two can be read
// side by side; tla/MAPPING.md lists the correspondence. Constants are a
// Config (Fixture is tla/Lazaret.cfg); Spec builds the check.Spec with Init,
// Next, the fairness of Spec, the invariants of Safety and the liveness
// properties.
package lazaret

import (
	"fmt"
	"strings"
)

// Maximum fixture sizes supported by the fixed-size State.
const (
	MaxDomains  = 2
	MaxSessions = 8
	MaxRequests = 8
)

// None is the index used for NoSession, NoRequest and NoCommand.
const None = 0xFF

// DomainPhases.
const (
	Absent uint8 = iota
	Starting
	Ready
	Stopping
	Failed
	Recovering
)

// MountStates.
const (
	Unmounted uint8 = iota
	Mounted
)

// ResourceStates (Stopped, Ready, Failed); Ready reuses the DomainPhase value
// name for readability in the transcription.
const (
	ResStopped uint8 = iota
	ResReady
	ResFailed
)

// PhysicalProcessStates.
const (
	ProcAbsent uint8 = iota
	ProcAlive
	ProcStopped
	ProcDead
)

// RuntimeCausalEdgeStates.
const (
	Unarmed uint8 = iota
	Armed
)

// SupervisorLeaseStates (Unarmed shared with the causal edge).
const (
	LeaseUnarmed uint8 = iota
	LeaseHeld
	LeaseLost
)

// DurableDecisions.
const (
	DecNone uint8 = iota
	DecPreparing
	DecPublished
	DecClean
)

// SessionPhases.
const (
	SNew uint8 = iota
	SWaiting
	SRegistering
	SAttached
	SPrompting
	SHostExecuting
	SClosed
	SFailed
)

// TerminalRoutes.
const (
	Detached uint8 = iota
	Sandbox
	Prompt
	HostProcess
)

// ConnectionStates.
const (
	Disconnected uint8 = iota
	Connected
)

// RequestPhases.
const (
	Unused uint8 = iota
	Verified
	AwaitingApproval
	Approved
	Executing
	CompletionPending
	DenialPending
	TimeoutPending
	CancellationPending
	FailurePending
	Completed
	Denied
	TimedOut
	Cancelled
	RFailed
)

// ApprovalSources.
const (
	NoApproval uint8 = iota
	AutoRule
	Developer
)

var (
	domainPhaseNames  = []string{"Absent", "Starting", "Ready", "Stopping", "Failed", "Recovering"}
	mountNames        = []string{"Unmounted", "Mounted"}
	resourceNames     = []string{"Stopped", "Ready", "Failed"}
	procNames         = []string{"Absent", "Alive", "Stopped", "Dead"}
	edgeNames         = []string{"Unarmed", "Armed"}
	leaseNames        = []string{"Unarmed", "Held", "Lost"}
	decisionNames     = []string{"None", "Preparing", "Published", "Clean"}
	sessionPhaseNames = []string{"New", "Waiting", "Registering", "Attached", "Prompting", "HostExecuting", "Closed", "Failed"}
	routeNames        = []string{"Detached", "Sandbox", "Prompt", "HostProcess"}
	connNames         = []string{"Disconnected", "Connected"}
	requestPhaseNames = []string{"Unused", "Verified", "AwaitingApproval", "Approved", "Executing",
		"CompletionPending", "DenialPending", "TimeoutPending", "CancellationPending", "FailurePending",
		"Completed", "Denied", "TimedOut", "Cancelled", "Failed"}
	approvalNames = []string{"NoApproval", "AutoRule", "Developer"}
)

// State holds the 28 variables of Lazaret.tla. Sets over Domains, Sessions
// and Requests are bitmasks; functions are arrays indexed by the constant's
// position in Config.
type State struct {
	DomainPhase            [MaxDomains]uint8
	StateAnchorState       [MaxDomains]uint8
	SidecarState           [MaxDomains]uint8
	SandboxState           [MaxDomains]uint8
	TrustReady             [MaxDomains]bool
	LockOwner              [MaxDomains]uint8 // session index or None
	Published              uint8             // set of domains
	Registered             [MaxDomains]uint8 // set of sessions
	Connected              [MaxDomains]uint8 // set of sessions
	SessionPhase           [MaxSessions]uint8
	TerminalRoute          [MaxSessions]uint8
	ConnectionState        [MaxSessions]uint8
	ActiveRequest          [MaxSessions]uint8 // request index or None
	RequestPhase           [MaxRequests]uint8
	ApprovalSource         [MaxRequests]uint8
	ApprovedCommand        [MaxRequests]uint8 // command index or None
	HostRunning            uint8              // set of requests
	DomainLockHeld         [MaxDomains]bool
	HostCoordinatorProc    [MaxDomains]uint8
	RuntimeSupervisorProc  [MaxDomains]uint8
	AttachedRunscProc      [MaxDomains]uint8
	RuntimeCausalEdge      [MaxDomains]uint8
	SupervisorLease        [MaxDomains]uint8
	RuntimeFaultsRemaining [MaxDomains]uint8
	DomainGeneration       [MaxDomains]uint8
	DurableDecision        [MaxDomains]uint8
	DurableSandboxIntent   [MaxDomains]bool
	PathMismatch           [MaxDomains]bool
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// stateSize is the canonical encoding length for a configuration.
func (c *Config) stateSize() int {
	d, s, r := len(c.Domains), len(c.Sessions), len(c.Requests)
	return 19*d + 2 + 4*s + 3*r + 1
}

// Encode writes the canonical encoding of st (unused array slots omitted).
func (m *Model) Encode(dst []byte, st State) {
	c := m.C
	nd, ns, nr := len(c.Domains), len(c.Sessions), len(c.Requests)
	i := 0
	put := func(v uint8) { dst[i] = v; i++ }
	for d := 0; d < nd; d++ {
		put(st.DomainPhase[d])
		put(st.StateAnchorState[d])
		put(st.SidecarState[d])
		put(st.SandboxState[d])
		put(b2u(st.TrustReady[d]))
		put(st.LockOwner[d])
		put(st.Registered[d])
		put(st.Connected[d])
		put(b2u(st.DomainLockHeld[d]))
		put(st.HostCoordinatorProc[d])
		put(st.RuntimeSupervisorProc[d])
		put(st.AttachedRunscProc[d])
		put(st.RuntimeCausalEdge[d])
		put(st.SupervisorLease[d])
		put(st.RuntimeFaultsRemaining[d])
		put(st.DomainGeneration[d])
		put(st.DurableDecision[d])
		put(b2u(st.DurableSandboxIntent[d]))
		put(b2u(st.PathMismatch[d]))
	}
	put(st.Published)
	put(st.HostRunning)
	for s := 0; s < ns; s++ {
		put(st.SessionPhase[s])
		put(st.TerminalRoute[s])
		put(st.ConnectionState[s])
		put(st.ActiveRequest[s])
	}
	for r := 0; r < nr; r++ {
		put(st.RequestPhase[r])
		put(st.ApprovalSource[r])
		put(st.ApprovedCommand[r])
	}
	put(0) // padding: keeps the length a function of the configuration only
}

// Decode is the inverse of Encode.
func (m *Model) Decode(src []byte) State {
	c := m.C
	nd, ns, nr := len(c.Domains), len(c.Sessions), len(c.Requests)
	var st State
	i := 0
	get := func() uint8 { v := src[i]; i++; return v }
	for d := 0; d < nd; d++ {
		st.DomainPhase[d] = get()
		st.StateAnchorState[d] = get()
		st.SidecarState[d] = get()
		st.SandboxState[d] = get()
		st.TrustReady[d] = get() == 1
		st.LockOwner[d] = get()
		st.Registered[d] = get()
		st.Connected[d] = get()
		st.DomainLockHeld[d] = get() == 1
		st.HostCoordinatorProc[d] = get()
		st.RuntimeSupervisorProc[d] = get()
		st.AttachedRunscProc[d] = get()
		st.RuntimeCausalEdge[d] = get()
		st.SupervisorLease[d] = get()
		st.RuntimeFaultsRemaining[d] = get()
		st.DomainGeneration[d] = get()
		st.DurableDecision[d] = get()
		st.DurableSandboxIntent[d] = get() == 1
		st.PathMismatch[d] = get() == 1
	}
	st.Published = get()
	st.HostRunning = get()
	for s := 0; s < ns; s++ {
		st.SessionPhase[s] = get()
		st.TerminalRoute[s] = get()
		st.ConnectionState[s] = get()
		st.ActiveRequest[s] = get()
	}
	for r := 0; r < nr; r++ {
		st.RequestPhase[r] = get()
		st.ApprovalSource[r] = get()
		st.ApprovedCommand[r] = get()
	}
	return st
}

func (m *Model) setNames(mask uint8, names []string) string {
	var out []string
	for i, n := range names {
		if mask&(1<<uint(i)) != 0 {
			out = append(out, n)
		}
	}
	return "{" + strings.Join(out, ", ") + "}"
}

func orNone(v uint8, names []string, none string) string {
	if v == None {
		return none
	}
	return names[v]
}

// Format renders a state in TLA+ notation, one variable per line.
func (m *Model) Format(st State) string {
	c := m.C
	var b strings.Builder
	fd := func(name string, f func(d int) string) {
		var parts []string
		for d := range c.Domains {
			parts = append(parts, c.Domains[d]+" :> "+f(d))
		}
		fmt.Fprintf(&b, "/\\ %s = %s\n", name, strings.Join(parts, " @@ "))
	}
	fs := func(name string, f func(s int) string) {
		var parts []string
		for s := range c.Sessions {
			parts = append(parts, c.Sessions[s]+" :> "+f(s))
		}
		fmt.Fprintf(&b, "/\\ %s = %s\n", name, strings.Join(parts, " @@ "))
	}
	fr := func(name string, f func(r int) string) {
		var parts []string
		for r := range c.Requests {
			parts = append(parts, c.Requests[r]+" :> "+f(r))
		}
		fmt.Fprintf(&b, "/\\ %s = %s\n", name, strings.Join(parts, " @@ "))
	}
	q := func(s string) string { return `"` + s + `"` }
	bs := func(v bool) string {
		if v {
			return "TRUE"
		}
		return "FALSE"
	}
	fd("domainPhase", func(d int) string { return q(domainPhaseNames[st.DomainPhase[d]]) })
	fd("stateAnchorState", func(d int) string { return q(mountNames[st.StateAnchorState[d]]) })
	fd("sidecarState", func(d int) string { return q(resourceNames[st.SidecarState[d]]) })
	fd("sandboxState", func(d int) string { return q(resourceNames[st.SandboxState[d]]) })
	fd("trustReady", func(d int) string { return bs(st.TrustReady[d]) })
	fd("lockOwner", func(d int) string { return orNone(st.LockOwner[d], c.Sessions, "NoSession") })
	fmt.Fprintf(&b, "/\\ published = %s\n", m.setNames(st.Published, c.Domains))
	fd("registered", func(d int) string { return m.setNames(st.Registered[d], c.Sessions) })
	fd("connected", func(d int) string { return m.setNames(st.Connected[d], c.Sessions) })
	fs("sessionPhase", func(s int) string { return q(sessionPhaseNames[st.SessionPhase[s]]) })
	fs("terminalRoute", func(s int) string { return q(routeNames[st.TerminalRoute[s]]) })
	fs("connectionState", func(s int) string { return q(connNames[st.ConnectionState[s]]) })
	fs("activeRequest", func(s int) string { return orNone(st.ActiveRequest[s], c.Requests, "NoRequest") })
	fr("requestPhase", func(r int) string { return q(requestPhaseNames[st.RequestPhase[r]]) })
	fr("approvalSource", func(r int) string {
		if st.ApprovalSource[r] == NoApproval {
			return "NoApproval"
		}
		return q(approvalNames[st.ApprovalSource[r]])
	})
	fr("approvedCommand", func(r int) string { return orNone(st.ApprovedCommand[r], c.Commands, "NoCommand") })
	fmt.Fprintf(&b, "/\\ hostRunning = %s\n", m.setNames(st.HostRunning, c.Requests))
	fd("domainLockHeld", func(d int) string { return bs(st.DomainLockHeld[d]) })
	fd("hostCoordinatorProc", func(d int) string { return q(procNames[st.HostCoordinatorProc[d]]) })
	fd("runtimeSupervisorProc", func(d int) string { return q(procNames[st.RuntimeSupervisorProc[d]]) })
	fd("attachedRunscProc", func(d int) string { return q(procNames[st.AttachedRunscProc[d]]) })
	fd("runtimeCausalEdge", func(d int) string { return q(edgeNames[st.RuntimeCausalEdge[d]]) })
	fd("supervisorLease", func(d int) string { return q(leaseNames[st.SupervisorLease[d]]) })
	fd("runtimeFaultsRemaining", func(d int) string { return fmt.Sprint(st.RuntimeFaultsRemaining[d]) })
	fd("domainGeneration", func(d int) string { return fmt.Sprint(st.DomainGeneration[d]) })
	fd("durableDecision", func(d int) string { return q(decisionNames[st.DurableDecision[d]]) })
	fd("durableSandboxIntent", func(d int) string { return bs(st.DurableSandboxIntent[d]) })
	fd("pathMismatch", func(d int) string { return bs(st.PathMismatch[d]) })
	return b.String()
}
