package hc

import (
	"log/slog"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/escalation"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/proc"
)

// identifyTimeout bounds the wait for an interactive session's guest
// leader (its escalation prompts wait as long for its terminal).
const identifyTimeout = sessionterm.IdentifyTimeout

// terminalDomain is what a Session Terminal uses of this generation.
func (c *coordinator) terminalDomain() sessionterm.Domain {
	return sessionterm.Domain{
		Broker: c.broker, Runtime: c.sb.Runtime(), Container: c.sb.Container(), Generation: c.generation,
		Dir: c.sessionDir(), BaseEnv: c.cfg.guest.Base(), Rlimits: c.cfg.rlimits(),
		Recorder: c.terminalRecorder(), Timing: c.timing, Log: c.log,
		Settle: idlemem.SettleSoon, // a session's start is done: HC goes back to relaying
	}
}

// runTerminal runs an interactive session (req.Tty) until it closes and
// its Session Terminal is released (package sessionterm); its escalation
// prompts and host processes are routed by the escalation role.
func (s *session) runTerminal(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) {
	c := s.c
	sessionterm.Run(c.terminalDomain(), sessionterm.Session{
		ID: s.id, Capability: s.capability, Joined: joined, Argv0: req.Argv[0], Size: req.WindowSize,
		Conn: s.conn, Raw: s.raw,
		Process: func() ([]byte, error) {
			cwd := sessionCwd(req)
			u, err := c.sessionUser(req)
			if err != nil {
				return nil, err
			}
			pj, err := ocispec.ProcessJSON(ocispec.LaunchIdentified(ocispec.Process{Args: req.Argv, Env: s.env(req, u), Cwd: cwd, Terminal: true, UID: u.UID, GID: u.GID, Rlimits: c.cfg.rlimits()}))
			if err != nil {
				return nil, errdefs.Mark(err, errdefs.ErrInvalid)
			}
			return pj, nil
		},
		Started: func(child *proc.Child) { s.setChild(child) },
		Stopped: s.wasStopped,
		SandboxStopped: func(code, sig int) (string, int, int, bool) {
			return c.sandboxStopNote(code, sig, s.wasStopped())
		},
		Refuse: func(err error) { refuse(s.conn, err) },
		Ending: func() { c.leave(s) },
	}, frames, func(admitted bool) sessionterm.Routes[*escalation.PromptAsk, *escalation.HostRun] {
		// The session's prompt port is registered with the escalation role
		// once its events are admitted; a session whose events are not
		// gets none, so its requests are treated as having no terminal.
		return terminalRoutes{c.esc.Routing(s.id, admitted)}
	})
}

// terminalRoutes is the escalation role's routing of a session's terminal
// loop (escalation.Routing) as a sessionterm.Routes.
type terminalRoutes struct{ r *escalation.Routing }

func (x terminalRoutes) Channels(route sessionterm.Route, closing bool) sessionterm.RouteChannels[*escalation.PromptAsk, *escalation.HostRun] {
	ch := x.r.Channels(route == sessionterm.RouteSandbox, closing)
	return sessionterm.RouteChannels[*escalation.PromptAsk, *escalation.HostRun]{Ask: ch.Ask, AskDone: ch.AskDone, Host: ch.Host, HostDone: ch.HostDone}
}

func (x terminalRoutes) BeginPrompt(t *sessionterm.Terminal, a *escalation.PromptAsk) {
	x.r.Begin(escTerminal{t}, a)
}
func (x terminalRoutes) EndPrompt(t *sessionterm.Terminal) { x.r.End(escTerminal{t}) }
func (x terminalRoutes) StartHost(t *sessionterm.Terminal, h *escalation.HostRun) {
	x.r.StartHost(escTerminal{t}, h)
}
func (x terminalRoutes) EndHost(t *sessionterm.Terminal) { x.r.EndHost(escTerminal{t}) }
func (x terminalRoutes) Close(t *sessionterm.Terminal)   { x.r.Close(escTerminal{t}) }
func (x terminalRoutes) Answer(t *sessionterm.Terminal, f *lv1.ClientFrame, closing bool) bool {
	return x.r.Answer(escTerminal{t}, f, closing)
}
func (x terminalRoutes) CancelHost(t *sessionterm.Terminal, f *lv1.ClientFrame, closing bool) bool {
	return x.r.CancelHost(escTerminal{t}, f, closing)
}

// escTerminal is a session terminal as the escalation role drives it.
type escTerminal struct{ t *sessionterm.Terminal }

func (a escTerminal) SetRoute(r escalation.Route) {
	switch r {
	case escalation.RoutePrompt:
		a.t.SetRoute(sessionterm.RoutePrompt)
	case escalation.RouteHostProcess:
		a.t.SetRoute(sessionterm.RouteHostProcess)
	default:
		a.t.SetRoute(sessionterm.RouteSandbox)
	}
}

func (a escTerminal) RouteName() string { return a.t.RouteName() }

func (a escTerminal) Send(f *lv1.ServerFrame) error { return a.t.Send(f) }

func (a escTerminal) Log() *slog.Logger { return a.t.Log() }
