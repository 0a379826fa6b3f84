package sessionterm

import lv1 "github.com/lazaret/lazaret/api/lazaret/v1"

// Route is the modeled terminal route of a session (the model's
// terminalRoute: Detached, Sandbox, Prompt, HostProcess). Only the sandbox
// route forwards PTY output and admits input, resize and signal events.
type Route int

const (
	RouteDetached Route = iota
	RouteSandbox
	// RoutePrompt: the session's terminal shows an escalation prompt; its
	// PTY is not read and no input reaches it.
	RoutePrompt
	// RouteHostProcess: an approved host command of the session's
	// escalation runs (StartHostExecution until its exact process is gone);
	// its PTY is not read and no input, resize or signal event reaches the
	// sandbox. Only the developer's HostProcessCancel is admitted.
	RouteHostProcess
)

func (r Route) String() string {
	switch r {
	case RouteSandbox:
		return "sandbox"
	case RoutePrompt:
		return "prompt"
	case RouteHostProcess:
		return "host-process"
	}
	return "detached"
}

// Routes is the escalation side of an interactive session's event loop:
// the prompts it shows (route Prompt) and the host processes it holds the
// terminal for (route HostProcess). A is a prompt, H a host execution;
// both are the escalation role's own types, which this package only
// passes back. The loop calls every method from its own goroutine, in
// the order of the session's events.
type Routes[A, H any] interface {
	// Channels returns what the loop waits on in route r: a new prompt
	// or host execution only on the sandbox route of a session that is
	// not closing, the current one's end otherwise.
	Channels(r Route, closing bool) RouteChannels[A, H]
	// BeginPrompt shows prompt a (the route becomes Prompt).
	BeginPrompt(t *Terminal, a A)
	// EndPrompt ends the shown prompt, which ended without an answer.
	EndPrompt(t *Terminal)
	// StartHost is StartHostExecution's route change (route HostProcess).
	StartHost(t *Terminal, h H)
	// EndHost restores the sandbox route once the host process is gone.
	EndHost(t *Terminal)
	// Answer takes a decision frame; it reports whether f was one.
	Answer(t *Terminal, f *lv1.ClientFrame, closing bool) bool
	// CancelHost takes a HostProcessCancel frame; it reports whether f
	// was one.
	CancelHost(t *Terminal, f *lv1.ClientFrame, closing bool) bool
	// Close is the first step of the close handshake (and of the release
	// after a lost client or PTY): the shown prompt is cancelled and a
	// running host process is killed, reaped and answered before it
	// returns; nothing new is routed afterwards. The loop may call it
	// again (the PTY's output ended, then the exec client exited): only
	// the first call acts.
	Close(t *Terminal)
}

// RouteChannels are what the loop selects on for escalation routing; a nil
// channel is never ready.
type RouteChannels[A, H any] struct {
	Ask      <-chan A        // a new prompt (route Sandbox only)
	AskDone  <-chan struct{} // the shown prompt ended without an answer
	Host     <-chan H        // StartHostExecution (route Sandbox only)
	HostDone <-chan struct{} // the running host process is gone
}
