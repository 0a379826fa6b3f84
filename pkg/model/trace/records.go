package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/lazaret/lazaret/pkg/model/lazaret"
	"github.com/lazaret/lazaret/pkg/modeltrace"
)

// ReadRecords parses a model trace written by package modeltrace, in file
// order (the trace's linearisation; see modeltrace's package doc). A line
// that is not a record, or a record of a newer format version, is an error
// naming the line.
func ReadRecords(r io.Reader) ([]modeltrace.Record, error) {
	var out []modeltrace.Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec modeltrace.Record
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return out, fmt.Errorf("model trace line %d is not a record: %w", n, err)
		}
		if rec.V > modeltrace.Version {
			return out, fmt.Errorf("model trace line %d has format version %d; this replayer reads up to %d (update it)", n, rec.V, modeltrace.Version)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// DomainReplay is the replay of one Domain's records.
type DomainReplay struct {
	Domain string
	// Steps are the model action instances the trace was explained by,
	// one per record plus inferred environment steps ("inferred: ...")
	// and reconcile steps found already done ("stutter: ...").
	Steps []string
	// Config is the model configuration the run instantiated.
	Config *lazaret.Config
	// Windows is the number of request windows the Domain's records were
	// replayed in (0: replayed whole; see replayWindows).
	Windows int
}

// RejectError is a recorded trace that is not a behaviour of the model.
type RejectError struct {
	// Model is the rejecting model ("" for Lazaret, whose records are
	// replayed per Domain; "PreparedLower", replayed whole).
	Model     string
	Domain    string
	Line      int // 1-based position among the Domain's records (PreparedLower: among all its records)
	Record    modeltrace.Record
	Label     string
	Reason    string
	Preceding []string // the model steps accepted before it
	State     string   // the model state the step was attempted in
	// Err is the cause when the trace is beyond what the model can
	// represent (ErrBeyondBounds) rather than a step it forbids.
	Err error
}

// ErrBeyondBounds is a trace the model cannot represent: more Domains'
// generations at once than the fixed-size PreparedLower state holds. It
// says nothing about the protocol; a caller that runs more Domains side by
// side (the scale benchmark) checks it with errors.Is.
var ErrBeyondBounds = errors.New("beyond the PreparedLower model's bounds")

// Unwrap returns the cause (ErrBeyondBounds) or nil.
func (e *RejectError) Unwrap() error { return e.Err }

func (e *RejectError) Error() string {
	var b strings.Builder
	if e.Model != "" {
		fmt.Fprintf(&b, "%s model trace rejected at record %d: %s recorded by %s (pid %d, Domain %s, generation %d, seq %d): %s\n",
			e.Model, e.Line, e.Label, e.Record.Role, e.Record.PID, e.Record.Domain, e.Record.Generation, e.Record.Seq, e.Reason)
	} else {
		fmt.Fprintf(&b, "model trace of Domain %s rejected at record %d: %s recorded by %s (pid %d, generation %d, seq %d): %s\n",
			e.Domain, e.Line, e.Label, e.Record.Role, e.Record.PID, e.Record.Generation, e.Record.Seq, e.Reason)
	}
	fmt.Fprintf(&b, "preceding steps (%d):\n", len(e.Preceding))
	for i, s := range e.Preceding {
		fmt.Fprintf(&b, "  %3d %s\n", i+1, s)
	}
	if e.State != "" {
		fmt.Fprintf(&b, "state before the step:\n%s", e.State)
	}
	return b.String()
}

// reconciled lists, for each recovery action a coordinator may record as a
// reconcile step, the values it assigns: when the model state already has
// them, the step changed nothing abstract and is a stuttering step.
var reconciled = map[string]map[string]string{
	"BootstrapRecoveryCoordinator": {"domainPhase[D1]": `"Absent"`},
	"RecoverSandbox":               {"sandboxState[D1]": `"Stopped"`, "attachedRunscProc[D1]": `"Absent"`},
	"RecoverSidecar":               {"sidecarState[D1]": `"Stopped"`},
	"RecoverStateAnchor":           {"stateAnchorState[D1]": `"Unmounted"`},
	"FinishRecovery":               {"domainPhase[D1]": `"Absent"`},
}

// environment are the environment actions a bootstrap recovery may
// discover: process losses no live process observed (a coordinator killed
// before it had a supervisor, or after its supervisor exited; a supervisor
// that died with it before running).
var environment = []string{"HardLoseHostCoordinator", "HardLoseRuntimeSupervisor", "HardLoseAttachedRunsc", "ExternalReapStoppedSupervisorAfterHcLoss"}

// ReplayLazaret replays a model trace through Lazaret.tla's Next relation,
// one Domain at a time (Domains share no variables): each Domain's records
// are abstracted to the model's values (the Domain to D1, Client Sessions
// and Escalation Requests to S1…, R1… in order of appearance), the
// configuration the run instantiated is built from them (ConfigFor), and
// every record must name an enabled action instance whose successor keeps
// every invariant. The first record that does not is reported as a
// *RejectError with the steps before it.
func ReplayLazaret(recs []modeltrace.Record) ([]DomainReplay, error) {
	var order []string
	by := map[string][]modeltrace.Record{}
	for i, r := range recs {
		if r.Model != "Lazaret" {
			continue
		}
		if r.Domain == "" {
			return nil, fmt.Errorf("model trace record %d (%s by %s) names no Domain", i+1, r.Action, r.Role)
		}
		if _, ok := by[r.Domain]; !ok {
			order = append(order, r.Domain)
		}
		by[r.Domain] = append(by[r.Domain], r)
	}
	var out []DomainReplay
	for _, d := range order {
		rep, err := replayWindows(d, separateRetriedSessions(by[d]))
		if err != nil {
			return out, err
		}
		out = append(out, rep)
	}
	return out, nil
}

// ConfigFor builds the Lazaret configuration one Domain's records
// instantiate, and the binding from product identifiers to its values:
// one Domain, every Client Session with the Domain's fingerprint and valid
// identity tuples (a session the coordinator refused for a mismatched
// configuration gets another fingerprint), one command per request
// (auto-approved when a rule approved it), valid request and approval
// identity tuples (the coordinator records only requests it verified).
func ConfigFor(domain string, recs []modeltrace.Record) (*lazaret.Config, Binding, error) {
	b := Binding{}
	b.Bind(Domain, domain, "D1")
	var sessions, requests []string
	seenS, seenR := map[string]bool{}, map[string]bool{}
	reqSession := map[string]string{}
	auto, mismatch := map[string]bool{}, map[string]bool{}
	approved := map[string]string{}
	for _, r := range recs {
		kind, ok := Lookup(r.Model, r.Action)
		if !ok {
			continue // reported by the replay
		}
		for i, p := range kind.Params {
			if i >= len(r.Args) {
				break
			}
			id := r.Args[i]
			switch p {
			case Session:
				if !seenS[id] {
					seenS[id] = true
					sessions = append(sessions, id)
				}
			case Request:
				if !seenR[id] {
					seenR[id] = true
					requests = append(requests, id)
				}
			}
		}
		switch r.Action {
		case "ReceiveEscalation":
			s := r.Facts["session"]
			reqSession[r.Args[0]] = s
			if !seenS[s] {
				seenS[s] = true
				sessions = append(sessions, s)
			}
		case "AutoApprove":
			auto[r.Args[0]] = true
		case "RejectConfigurationMismatch":
			mismatch[r.Args[0]] = true
		case "DeveloperApprove":
			if len(r.Args) > 1 {
				approved[r.Args[0]] = r.Args[1]
			}
		}
	}
	if len(sessions) > lazaret.MaxSessions {
		return nil, nil, fmt.Errorf("Domain %s's trace has %d Client Sessions; the model state holds %d (record fewer sessions per workspace)", domain, len(sessions), lazaret.MaxSessions)
	}
	if len(requests) > lazaret.MaxRequests {
		return nil, nil, fmt.Errorf("Domain %s's trace has %d Escalation Requests; the model state holds %d (record fewer per workspace)", domain, len(requests), lazaret.MaxRequests)
	}
	if len(sessions) == 0 {
		sessions = []string{""}
	}
	c := &lazaret.Config{Name: "trace " + domain, Domains: []string{"D1"}, DomainFingerprint: []string{"config-a"},
		DomainCoordinatorIdentity: []string{"coordinator-1"}, DomainSidecarIdentity: []string{"sidecar-1"}, DomainSandboxIdentity: []string{"sandbox-1"},
		CoordinatorCertificateValid: []bool{true}, SidecarCertificateValid: []bool{true}, SandboxCertificateValid: []bool{true},
		ConfigSafe: []bool{true}, SandboxIsolationSafe: []bool{true},
		MaxDomainGeneration: 250, InitRuntimeFaults: 2}
	sIndex := map[string]int{}
	for i, s := range sessions {
		sIndex[s] = i
		v := fmt.Sprintf("S%d", i+1)
		if s != "" {
			b.Bind(Session, s, v)
		}
		fp := "config-a"
		if mismatch[s] {
			fp = "config-b"
		}
		c.Sessions = append(c.Sessions, v)
		c.SessionDomain = append(c.SessionDomain, 0)
		c.SessionFingerprint = append(c.SessionFingerprint, fp)
		c.SessionCliIdentity = append(c.SessionCliIdentity, fmt.Sprintf("cli-%d", i+1))
		c.SessionAnchorIdentity = append(c.SessionAnchorIdentity, fmt.Sprintf("anchor-%d", i+1))
		c.CliCertificateValid = append(c.CliCertificateValid, true)
	}
	if len(requests) == 0 {
		requests = []string{""}
	}
	for i, r := range requests {
		v := fmt.Sprintf("R%d", i+1)
		if r != "" {
			b.Bind(Request, r, v)
		}
		s := sIndex[reqSession[r]]
		cmd := len(c.Commands)
		c.Commands = append(c.Commands, fmt.Sprintf("Cmd%d", i+1))
		c.CommandRequiresShell = append(c.CommandRequiresShell, false)
		c.CommandContentSafe = append(c.CommandContentSafe, true)
		app := cmd
		if d, ok := approved[r]; ok {
			app = len(c.Commands)
			c.Commands = append(c.Commands, fmt.Sprintf("Approved%d", i+1))
			c.CommandRequiresShell = append(c.CommandRequiresShell, false)
			c.CommandContentSafe = append(c.CommandContentSafe, true)
			b.Bind(Command, d, c.Commands[app])
		}
		c.Requests = append(c.Requests, v)
		c.RequestSession = append(c.RequestSession, s)
		c.RequestCommand = append(c.RequestCommand, cmd)
		c.RequestSandboxIdentity = append(c.RequestSandboxIdentity, "sandbox-1")
		c.RequestCliIdentity = append(c.RequestCliIdentity, c.SessionCliIdentity[s])
		c.RequestSessionAnchor = append(c.RequestSessionAnchor, c.SessionAnchorIdentity[s])
		c.RequestCredentialValid = append(c.RequestCredentialValid, true)
		c.RequestSignatureValid = append(c.RequestSignatureValid, true)
		c.ApprovalCliIdentity = append(c.ApprovalCliIdentity, c.SessionCliIdentity[s])
		c.ApprovalSessionAnchor = append(c.ApprovalSessionAnchor, c.SessionAnchorIdentity[s])
		c.ApprovalSignatureValid = append(c.ApprovalSignatureValid, true)
		c.ApprovalCommand = append(c.ApprovalCommand, app)
		c.AutoRuleMatches = append(c.AutoRuleMatches, auto[r])
	}
	if len(c.Commands) >= lazaret.None {
		return nil, nil, fmt.Errorf("Domain %s's trace has too many commands", domain)
	}
	return c, b, c.Validate()
}

// Request windows. The model state holds lazaret.MaxRequests Escalation
// Requests; a Domain whose trace has more (a scenario sending a thousand
// escalations) is replayed as overlapping projections: requests numbered
// in order of first appearance, windows of MaxRequests consecutive ones
// starting every MaxRequests/2, each replayed with every record that names
// no request (Domain and session steps) and the records of its own
// requests. Distinct requests' actions touch only their own variables
// except the session's activeRequest and terminalRoute and hostRunning, so
// a projection of an accepted trace is accepted; and every pair of
// requests whose records interleave (the only ones whose shared variables
// can constrain each other) must be less than MaxRequests/2 apart in that
// numbering — so that some window holds both — or the replay refuses the
// trace as beyond the model's bounds.
const windowStride = lazaret.MaxRequests / 2

// sessionBegins are the model's actions that begin a Client Session: each
// needs sessionPhase = "New", so a model session begins at most once.
var sessionBegins = map[string]bool{"StartNewDomain": true, "StartReadySession": true, "WaitForDomain": true}

// separateRetriedSessions gives each Client Session of a CLI process its own
// name. The trace names a session by its CLI's process
// (modeltrace.SessionKey), and a CLI whose session ended before it was
// accepted starts or joins again as a new Client Session under the same
// name (client.End.Retry: its coordinator was lost or stopping). As a
// model session begins once, a later session-beginning step under a name
// that began one is that CLI's next session: from it on, the name's
// records (arguments and the "session" fact) are renamed "<name>#2", and
// so on. Records are copied, not changed.
func separateRetriedSessions(recs []modeltrace.Record) []modeltrace.Record {
	begun := map[string]int{}
	name := func(k string) string {
		if n := begun[k]; n > 1 {
			return fmt.Sprintf("%s#%d", k, n)
		}
		return k
	}
	out := make([]modeltrace.Record, len(recs))
	for i, r := range recs {
		kind, known := Lookup(r.Model, r.Action)
		if known && sessionBegins[r.Action] && len(kind.Params) > 0 && kind.Params[0] == Session && len(r.Args) > 0 {
			begun[r.Args[0]]++
		}
		if known {
			var args []string
			for j, p := range kind.Params {
				if p != Session || j >= len(r.Args) || name(r.Args[j]) == r.Args[j] {
					continue
				}
				if args == nil {
					args = append([]string(nil), r.Args...)
				}
				args[j] = name(r.Args[j])
			}
			if args != nil {
				r.Args = args
			}
		}
		if s, ok := r.Facts["session"]; ok && name(s) != s {
			facts := make(map[string]string, len(r.Facts))
			for k, v := range r.Facts {
				facts[k] = v
			}
			facts["session"] = name(s)
			r.Facts = facts
		}
		out[i] = r
	}
	return out
}

// requestOf returns the Escalation Request a record names ("" for none).
func requestOf(r modeltrace.Record) string {
	kind, ok := Lookup(r.Model, r.Action)
	if !ok || len(kind.Params) == 0 || kind.Params[0] != Request || len(r.Args) == 0 {
		return ""
	}
	return r.Args[0]
}

func replayWindows(domain string, recs []modeltrace.Record) (DomainReplay, error) {
	index := map[string]int{}
	var first, last []int
	for i, r := range recs {
		q := requestOf(r)
		if q == "" {
			continue
		}
		n, ok := index[q]
		if !ok {
			n = len(first)
			index[q] = n
			first, last = append(first, i), append(last, i)
		}
		last[n] = i
	}
	if len(first) <= lazaret.MaxRequests {
		return replayDomain(domain, recs)
	}
	for a := range first {
		for b := a + windowStride; b < len(first); b++ {
			if first[b] < last[a] {
				return DomainReplay{Domain: domain}, fmt.Errorf("Domain %s's trace has %d Escalation Requests; requests %d and %d (in order of first appearance) interleave but are %d apart (a replay window holds any two less than %d apart): beyond the model's bounds (record fewer concurrent requests per workspace)",
					domain, len(first), a+1, b+1, b-a, windowStride)
			}
		}
	}
	var rep DomainReplay
	for start := 0; ; start += windowStride {
		end := min(start+lazaret.MaxRequests, len(first))
		var proj []modeltrace.Record
		for _, r := range recs {
			if q := requestOf(r); q == "" || index[q] >= start && index[q] < end {
				proj = append(proj, r)
			}
		}
		var err error
		rep, err = replayDomain(domain, proj)
		rep.Windows++
		if err != nil {
			if re, ok := err.(*RejectError); ok {
				re.Reason += fmt.Sprintf(" (in the replay window of requests %d-%d of %d, in order of first appearance)", start+1, end, len(first))
			}
			return rep, err
		}
		if end == len(first) {
			rep.Windows = start/windowStride + 1
			return rep, nil
		}
	}
}

func replayDomain(domain string, recs []modeltrace.Record) (DomainReplay, error) {
	cfg, b, err := ConfigFor(domain, recs)
	if err != nil {
		return DomainReplay{Domain: domain}, err
	}
	m := lazaret.New(cfg)
	sp := m.Spec()
	rep := DomainReplay{Domain: domain, Config: cfg}
	cur := m.Init()
	reject := func(i int, r modeltrace.Record, label, reason string) error {
		return &RejectError{Domain: domain, Line: i + 1, Record: r, Label: label, Reason: reason,
			Preceding: append([]string(nil), rep.Steps...), State: m.Format(cur)}
	}
	holds := func(st lazaret.State, want map[string]string) bool {
		p := Project(m.Format(st))
		for k, v := range want {
			if p[k] != v {
				return false
			}
		}
		return len(want) > 0
	}
	invariants := func(st lazaret.State) string {
		for _, inv := range sp.Invariants {
			if !inv.Holds(st) {
				return inv.Name
			}
		}
		return ""
	}
	for i, r := range recs {
		ev := Event{Seq: r.Seq, Model: r.Model, Action: r.Action, Args: r.Args, Role: r.Role}
		label, err := b.Label(ev)
		if err != nil {
			return rep, reject(i, r, r.Action+"("+strings.Join(r.Args, ", ")+")", err.Error())
		}
		succ := sp.Successors(cur, label)
		if len(succ) == 0 && r.Reconcile {
			if holds(cur, reconciled[r.Action]) {
				rep.Steps = append(rep.Steps, "stutter: "+label+" (already done)")
				continue
			}
			if r.Action == "BootstrapRecoveryCoordinator" {
				if path, st, ok := infer(sp, cur, label, invariants); ok {
					for _, p := range path {
						rep.Steps = append(rep.Steps, "inferred: "+p)
					}
					cur = st
					succ = sp.Successors(cur, label)
				}
			}
		}
		if len(succ) == 0 {
			return rep, reject(i, r, label, "not enabled: no step of Next in the model state below is this action")
		}
		next := succ[0]
		if inv := invariants(next); inv != "" {
			return rep, reject(i, r, label, "the step violates invariant "+inv)
		}
		rep.Steps = append(rep.Steps, label)
		cur = next
	}
	return rep, nil
}

// infer finds the shortest sequence (at most three) of environment steps
// after which label is enabled, every intermediate state keeping the
// invariants.
func infer(sp interface {
	Successors(lazaret.State, string) []lazaret.State
}, cur lazaret.State, label string, invariants func(lazaret.State) string) ([]string, lazaret.State, bool) {
	type node struct {
		st   lazaret.State
		path []string
	}
	frontier := []node{{st: cur}}
	for depth := 0; depth < 3; depth++ {
		var next []node
		for _, n := range frontier {
			for _, a := range environment {
				l := a + "(D1)"
				for _, t := range sp.Successors(n.st, l) {
					if invariants(t) != "" {
						continue
					}
					p := append(append([]string(nil), n.path...), l)
					if len(sp.Successors(t, label)) > 0 {
						return p, t, true
					}
					next = append(next, node{t, p})
				}
			}
		}
		frontier = next
	}
	return nil, cur, false
}
