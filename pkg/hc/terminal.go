package hc

import (
	"path"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// identifyTimeout bounds the wait for an interactive session's guest
// leader (its escalation prompts wait as long for its terminal).
const identifyTimeout = sessionterm.IdentifyTimeout

// terminalDomain is what a Session Terminal uses of this generation.
func (c *coordinator) terminalDomain() sessionterm.Domain {
	return sessionterm.Domain{
		Broker: c.broker, Runtime: c.rt, Container: c.container, Generation: c.generation,
		Dir: c.sessionDir(), BaseEnv: c.baseEnv, Rlimits: c.rlimits(),
		Recorder: c.terminalRecorder(), Timing: c.timing, Log: c.log,
	}
}

// runTerminal runs an interactive session (req.Tty) until it closes and
// its Session Terminal is released (package sessionterm); its escalation
// prompts and host processes are routed by terminalPrompts.
func (s *session) runTerminal(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) {
	c := s.c
	sessionterm.Run(c.terminalDomain(), sessionterm.Session{
		ID: s.id, Capability: s.capability, Joined: joined, Argv0: req.Argv[0], Size: req.WindowSize,
		Conn: s.conn, Raw: s.raw,
		Process: func() ([]byte, error) {
			cwd := ocispec.WorkspaceDir
			if req.WorkspaceSubdir != "" {
				cwd = path.Join(cwd, req.WorkspaceSubdir)
			}
			u, err := c.sessionUser(req)
			if err != nil {
				return nil, err
			}
			pj, err := ocispec.ProcessJSON(ocispec.Process{Args: ocispec.SessionArgs(req.Argv), Env: s.env(req, u), Cwd: cwd, Terminal: true, UID: u.UID, GID: u.GID, Rlimits: c.rlimits()})
			if err != nil {
				return nil, errdefs.Mark(err, errdefs.ErrInvalid)
			}
			return pj, nil
		},
		Started: s.setChild,
		Stopped: s.wasStopped,
		Refuse:  func(err error) { refuse(s.conn, err) },
	}, frames, func(admitted bool) sessionterm.Routes[*promptAsk, *hostRun] {
		return terminalRoutes{newTerminalPrompts(c, s.id, admitted)}
	})
}

// terminalRoutes is the escalation routing of a session's terminal loop
// (sessionterm.Routes) over its terminalPrompts.
type terminalRoutes struct{ p *terminalPrompts }

func (r terminalRoutes) Channels(route sessionterm.Route, closing bool) sessionterm.RouteChannels[*promptAsk, *hostRun] {
	ch := r.p.channels(route, closing)
	return sessionterm.RouteChannels[*promptAsk, *hostRun]{Ask: ch.ask, AskDone: ch.askDone, Host: ch.host, HostDone: ch.hostDone}
}
func (r terminalRoutes) BeginPrompt(t *sessionterm.Terminal, a *promptAsk) { r.p.begin(t, a) }
func (r terminalRoutes) EndPrompt(t *sessionterm.Terminal)                 { r.p.end(t) }
func (r terminalRoutes) StartHost(t *sessionterm.Terminal, h *hostRun)     { r.p.startHost(t, h) }
func (r terminalRoutes) EndHost(t *sessionterm.Terminal)                   { r.p.endHost(t) }
func (r terminalRoutes) Close(t *sessionterm.Terminal)                     { r.p.close(t) }
func (r terminalRoutes) Answer(t *sessionterm.Terminal, f *lv1.ClientFrame, closing bool) bool {
	return r.p.answer(t, f, closing)
}
func (r terminalRoutes) CancelHost(t *sessionterm.Terminal, f *lv1.ClientFrame, closing bool) bool {
	return r.p.cancelHost(t, f, closing)
}
