package cli

import (
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
type escalationPrompts struct {
	c      *ttyClient
	anchor *trust.SessionAnchor

	mu  sync.Mutex
	in  chan []byte   // terminal input while a prompt is open
	end chan struct{} // closed when the coordinator ends the prompt
	id  string
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
	sd, err := record.SignDecision(d, func(name string, payload []byte) ([]byte, error) { return p.anchor.Sign(name, payload), nil })
	if err != nil {
		say("  cannot sign the decision: %v\n", err)
		return
	}
	p.c.fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_EscalationDecision{EscalationDecision: sd}})
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
