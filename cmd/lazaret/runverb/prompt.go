package runverb

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/trust"
)

// escalationPrompts shows host escalation prompts at this session's
// terminal (spec §3.7, DX-4). While a prompt is open the coordinator does
// not read the session's PTY and the terminal's bytes come here instead of
// the sandbox; the answer is a DeveloperDecision signed by this session's
// Session Anchor, bound to the request, the decision and the exact argv.
//
// While an approved host command runs (route HostProcess, between
// HostProcessStarted and HostProcessEnded) the coordinator neither reads
// the session's PTY nor takes its input: the CLI shows the command's
// status, sends no keystroke, and turns Ctrl-C into HostProcessCancel.
type escalationPrompts struct {
	c      *ttyClient
	anchor *trust.SessionAnchor

	mu  sync.Mutex
	in  chan []byte   // terminal input while a prompt is open
	end chan struct{} // closed when the coordinator ends the prompt
	id  string
	// host is the request ID of the running host command ("" if none);
	// hostCancel is set once its cancellation was sent.
	host       string
	hostCancel bool
}

// inline handles the host command's frames on the frame reader's
// goroutine (readFrames), in order with the terminal output.
func (p *escalationPrompts) inline(f *lv1.ServerFrame) bool {
	switch {
	case f.GetHostProcessStarted() != nil:
		p.hostStarted(f.GetHostProcessStarted())
	case f.GetHostProcessEnded() != nil:
		p.hostEnded(f.GetHostProcessEnded())
		// A resize meanwhile was refused: send the current size.
		p.c.sendSize()
	default:
		return false
	}
	return true
}

// hostStarted shows the running host command's status line.
func (p *escalationPrompts) hostStarted(h *lv1.HostProcessStarted) {
	p.mu.Lock()
	p.host, p.hostCancel = h.RequestId, false
	p.mu.Unlock()
	by := "approved by you"
	if h.DecidedBy == "auto-rule" {
		by = "auto-approved by a rule"
	}
	say("\n[lazaret] host command running: %s (%s; input paused, Ctrl-C cancels it)\n", record.QuoteArgv(h.Argv), by)
}

// hostEnded shows how the host command ended; the terminal is the
// sandbox's again.
func (p *escalationPrompts) hostEnded(h *lv1.HostProcessEnded) {
	p.mu.Lock()
	if p.host != h.RequestId {
		p.mu.Unlock()
		return
	}
	p.host = ""
	p.mu.Unlock()
	say("[lazaret] host command %s\n", hostOutcome(h))
}

// hostOutcome is the status line's ending for h.
func hostOutcome(h *lv1.HostProcessEnded) string {
	switch h.Outcome {
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_COMPLETED:
		if h.Signal != 0 {
			return fmt.Sprintf("ended by signal %d", h.Signal)
		}
		return fmt.Sprintf("exited with status %d", h.ExitCode)
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_CANCELLED:
		return "cancelled: " + record.EscapeText(h.Reason)
	case lv1.EscalationOutcome_ESCALATION_OUTCOME_TIMED_OUT:
		return "timed out: " + record.EscapeText(h.Reason)
	}
	return "failed: " + record.EscapeText(h.Reason)
}

// hostInput takes terminal input while a host command runs: nothing is
// forwarded, and Ctrl-C cancels the command (once). It reports whether a
// host command owns the terminal.
func (p *escalationPrompts) hostInput(b []byte) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	id, sent := p.host, p.hostCancel
	if id != "" && !sent && bytes.IndexByte(b, 3) >= 0 {
		p.hostCancel = true
	}
	p.mu.Unlock()
	if id == "" {
		return false
	}
	if !sent && bytes.IndexByte(b, 3) >= 0 {
		say("^C\n[lazaret] cancelling the host command\n")
		p.c.sess.CancelHostProcess(id)
	}
	return true
}

// input returns the channel terminal input goes to while a prompt is open.
func (p *escalationPrompts) input() chan []byte {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.in
}

// show opens the prompt (the coordinator sends one at a time).
func (p *escalationPrompts) show(pr *lv1.EscalationPrompt) {
	p.mu.Lock()
	if p.in != nil {
		p.mu.Unlock()
		return
	}
	in, end := make(chan []byte, 64), make(chan struct{})
	p.in, p.end, p.id = in, end, pr.RequestId
	p.mu.Unlock()
	go p.run(pr, in, end)
}

// ended closes a prompt the coordinator ended without an answer.
func (p *escalationPrompts) ended(e *lv1.EscalationPromptEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in != nil && p.id == e.RequestId {
		close(p.end)
		p.in = nil
		fmt.Fprintf(os.Stdout, "\r\n[lazaret] escalation request closed: %s\r\n", record.EscapeText(e.Reason))
	}
}

func (p *escalationPrompts) close(in chan []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.in == in {
		p.in = nil
	}
}

func say(format string, a ...any) {
	os.Stdout.WriteString(strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", "\r\n"))
}

func (p *escalationPrompts) run(pr *lv1.EscalationPrompt, in chan []byte, end chan struct{}) {
	defer p.close(in)
	if pr.NetworkHost != "" {
		p.runNetwork(pr, in, end)
		return
	}
	say("\n[lazaret] host escalation request\n")
	say("  profile: %s\n  session: %s\n", record.EscapeText(pr.Profile), pr.SessionId)
	say("  command: %s\n", record.QuoteArgv(pr.Argv))
	say("  cwd:     %s (on the host: the same directory of your workspace)\n", record.EscapeText(pr.Cwd))
	if pr.Justification != "" {
		say("  why:     %s\n", record.EscapeText(pr.Justification))
	}
	argv := pr.Argv
	decision := lv1.DecisionKind_DECISION_KIND_DENY
	for {
		say("Run on the host? [y]es, [n]o, [e]dit (%ds): ", pr.TimeoutSeconds)
		ans, ok := readLine(in, end, "")
		if !ok {
			return
		}
		switch strings.ToLower(strings.TrimSpace(ans)) {
		case "y", "yes":
			decision = lv1.DecisionKind_DECISION_KIND_APPROVE
		case "n", "no", "\x03":
		case "e", "edit":
			prefill := ""
			if plain(argv) {
				prefill = strings.Join(argv, " ")
			}
			say("command> %s", prefill)
			line, ok := readLine(in, end, prefill)
			if !ok {
				return
			}
			edited, err := record.ParseArgv(line)
			if err != nil {
				say("  %v\n", err)
				continue
			}
			argv = edited
			decision = lv1.DecisionKind_DECISION_KIND_APPROVE
			say("  approved: %s\n", record.QuoteArgv(argv))
		default:
			continue
		}
		break
	}
	d := &lv1.DeveloperDecision{RequestId: pr.RequestId, SessionId: pr.SessionId, Generation: pr.Generation, Decision: decision}
	if decision == lv1.DecisionKind_DECISION_KIND_APPROVE {
		d.ApprovedArgv = argv
	} else {
		say("  denied\n")
	}
	// The terminal is given back before the decision leaves: what is typed
	// once the host command starts (Ctrl-C, the escapes) must not be
	// read as more of this answer.
	p.close(in)
	p.decide(d)
}

// plain reports whether argv can be edited as space-separated words.
func plain(argv []string) bool {
	for _, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t'\"\\") || !utf8.ValidString(a) {
			return false
		}
		for _, r := range a {
			if r < 0x20 || r == 0x7f {
				return false
			}
		}
	}
	return true
}

// readLine reads one line from raw terminal input with echo, backspace and
// Ctrl-U; Ctrl-C answers "\x03". ok is false when the prompt ended.
func readLine(in <-chan []byte, end <-chan struct{}, prefill string) (string, bool) {
	line := []rune(prefill)
	for {
		var b []byte
		select {
		case b = <-in:
		case <-end:
			return "", false
		}
		for _, ch := range string(b) {
			switch {
			case ch == '\r' || ch == '\n':
				os.Stdout.WriteString("\r\n")
				return string(line), true
			case ch == 3: // Ctrl-C
				os.Stdout.WriteString("^C\r\n")
				return "\x03", true
			case ch == 0x7f || ch == 8:
				if len(line) > 0 {
					line = line[:len(line)-1]
					os.Stdout.WriteString("\b \b")
				}
			case ch == 0x15: // Ctrl-U
				for range line {
					os.Stdout.WriteString("\b \b")
				}
				line = line[:0]
			case ch >= 0x20 && ch != 0x1b:
				line = append(line, ch)
				os.Stdout.WriteString(string(ch))
			}
		}
	}
}

// runNetwork asks about a host outside the profile's allowlist (network.ask).
func (p *escalationPrompts) runNetwork(pr *lv1.EscalationPrompt, in chan []byte, end chan struct{}) {
	target := fmt.Sprintf("%s:%d", record.EscapeText(pr.NetworkHost), pr.NetworkPort)
	say("\n[lazaret] network request\n")
	say("  profile: %s\n  session: %s\n", record.EscapeText(pr.Profile), pr.SessionId)
	say("  host:    %s (not in the profile's network.allow_hosts)\n", target)
	scope := ""
	for scope == "" {
		say("Allow it? [o]nce, [d]omain (until this Domain stops), [n]o (%ds): ", pr.TimeoutSeconds)
		ans, ok := readLine(in, end, "")
		if !ok {
			return
		}
		switch strings.ToLower(strings.TrimSpace(ans)) {
		case "o", "once":
			scope = "once"
		case "d", "domain":
			scope = "domain"
		case "n", "no", "\x03":
			scope = "deny"
		}
	}
	d := &lv1.DeveloperDecision{RequestId: pr.RequestId, SessionId: pr.SessionId, Generation: pr.Generation, Decision: lv1.DecisionKind_DECISION_KIND_DENY}
	if scope != "deny" {
		d.Decision, d.NetworkScope = lv1.DecisionKind_DECISION_KIND_APPROVE, scope
		say("  allowed (%s); to allow it always add %q to network.allow_hosts\n", scope, pr.NetworkHost)
	} else {
		say("  denied\n")
	}
	// The terminal is given back before the decision leaves: what is typed
	// once the host command starts (Ctrl-C, the escapes) must not be
	// read as more of this answer.
	p.close(in)
	p.decide(d)
}

// decide signs the developer's decision with the session's anchor and
// sends it to the coordinator.
func (p *escalationPrompts) decide(d *lv1.DeveloperDecision) {
	sd, err := record.SignDecision(d, func(name string, payload []byte) ([]byte, error) { return p.anchor.Sign(name, payload), nil })
	if err != nil {
		say("  cannot sign the decision: %v\n", err)
		return
	}
	p.c.sess.Decide(sd)
}
