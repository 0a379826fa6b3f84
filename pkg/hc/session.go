package hc

import (
	"errors"
	"io"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/rawio"
	"github.com/lazaret/lazaret/pkg/secretenv"
	"github.com/lazaret/lazaret/pkg/trust"
	"github.com/lazaret/lazaret/pkg/trusteddir"
)

// session is one Client Session: a connection and its `runsc exec` client.
type session struct {
	id         string
	mtKey      string // the Client Session's model-trace key (modeltrace.SessionKey)
	capability []byte // the Session Request Capability (pkg/trust encoding)
	claims     *trust.CapabilityClaims
	c          *coordinator
	conn       *control.Conn
	raw        net.Conn
	mu         sync.Mutex
	child      sessionProcess
	tty        bool // interactive: escalation prompts go to its terminal
	// killed: the exec client is killed as soon as it exists (teardown or
	// stop reached the session before its command started); stopped: by
	// `lazaret stop`, which the Exit frame reports.
	killed, stopped bool
	acceptOnce      sync.Once
	leaveOnce       sync.Once
}

// accept sends the session's Accepted frame, once. It is sent before the
// command can run — from the exec client's acquisition while it is held
// at its exec stop, or before the start request goes to the sandbox's
// init — never after: a CLI whose coordinator is lost before Accepted
// starts or joins again (client.End.Retry), which is safe only if the
// command cannot have run.
func (s *session) accept(joined bool) {
	s.acceptOnce.Do(func() {
		s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Accepted{Accepted: &lv1.Accepted{SessionId: s.id, Generation: s.c.generation, Joined: joined, SessionCapability: s.capability}}})
	})
}

// kill stops the session's exec client (Domain teardown, lazaret stop),
// now or, if the command is still starting, as soon as it exists.
func (s *session) kill() {
	s.mu.Lock()
	s.killed = true
	child := s.child
	s.mu.Unlock()
	if child != nil {
		child.Signal(unix.SIGKILL)
	}
}

// setChild records the session's exec client (or first-session
// process), killing it at once when the session was killed while the
// command started.
func (s *session) setChild(child sessionProcess) {
	s.mu.Lock()
	s.child = child
	killed := s.killed
	s.mu.Unlock()
	if killed {
		child.Signal(unix.SIGKILL)
	}
}

// wasStopped reports whether `lazaret stop` ended the session.
func (s *session) wasStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (c *coordinator) acceptLoop() {
	for {
		conn, err := c.pub.Accept()
		if err != nil {
			return
		}
		go c.serveConn(conn)
	}
}

// passEnv lists host variables a CLI may pass into the guest.
func passEnv(k string) bool {
	switch k {
	case "TERM", "LANG", "COLORTERM", "LANGUAGE", "TZ":
		return true
	}
	return strings.HasPrefix(k, "LC_")
}

func refuse(conn *control.Conn, err error) {
	conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Error{Error: &lv1.Error{Category: errdefs.Category(err), Message: err.Error(), Retry: errors.Is(err, errStopping)}}})
}

// validate checks a RunRequest against this Domain.
func (c *coordinator) validate(r *lv1.RunRequest) error {
	if r.ProtocolVersion != lv1.ProtocolVersion_PROTOCOL_VERSION_1 {
		return errdefs.New(errdefs.ErrRefused, "control protocol version %d is not supported by this Host Coordinator (%d): use matching lazaret binaries", r.ProtocolVersion, lv1.ProtocolVersion_PROTOCOL_VERSION_1)
	}
	if r.DomainId != string(c.paths.ID) || r.Profile != c.cfg.profileName {
		return errdefs.New(errdefs.ErrRefused, "request for Domain %s profile %q reached Domain %s profile %q", r.DomainId, r.Profile, c.paths.ID, c.cfg.profileName)
	}
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return errdefs.New(errdefs.ErrInvalid, "empty command")
	}
	if r.WorkspaceSubdir != "" && (path.IsAbs(r.WorkspaceSubdir) || path.Clean(r.WorkspaceSubdir) != r.WorkspaceSubdir || strings.HasPrefix(r.WorkspaceSubdir, "..")) {
		return errdefs.New(errdefs.ErrInvalid, "bad workspace subdirectory %q", r.WorkspaceSubdir)
	}
	if err := sessionterm.Validate(r); err != nil {
		return err
	}
	for k := range r.Env {
		if !passEnv(k) {
			return errdefs.New(errdefs.ErrInvalid, "environment variable %s may not be passed by a CLI", k)
		}
	}
	if r.LingerMs > uint64(config.MaxLinger/time.Millisecond) {
		return errdefs.New(errdefs.ErrInvalid, "linger of %d ms is longer than the most a Domain lingers (%s)", r.LingerMs, config.MaxLinger)
	}
	return nil
}

func (c *coordinator) serveConn(raw *net.UnixConn) {
	defer raw.Close()
	// Only the developer can reach the 0700 runtime directory; check the
	// peer uid anyway (defence in depth, not protocol identity).
	cred, err := trusteddir.PeerCred(raw)
	if err != nil || int(cred.Uid) != os.Getuid() {
		return
	}
	mtKey := modeltrace.SessionKey(int(cred.Pid))
	// Raw non-blocking socket I/O, one write per frame: terminal output is
	// relayed in thousands of frames a second (package rawio says why).
	rconn, err := rawio.NewConn(raw)
	if err != nil {
		return
	}
	tconn, client, err := c.handshake(rconn)
	if err != nil {
		c.log.Warn("control connection refused", "err", err)
		return
	}
	conn := control.NewBatchedConn(tconn, rconn)
	if client == nil {
		c.enroll(conn)
		return
	}
	tconn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var first lv1.ClientFrame
	if err := conn.Read(&first); err != nil {
		c.log.Warn("bad first frame", "err", err)
		return
	}
	tconn.SetReadDeadline(time.Time{})
	if st := first.GetStatus(); st != nil {
		c.serveStatus(conn, st)
		return
	}
	if st := first.GetStop(); st != nil {
		c.serveStop(conn, st)
		return
	}
	req := first.GetRun()
	if req == nil {
		refuse(conn, errdefs.New(errdefs.ErrInvalid, "first frame must be a RunRequest, StatusRequest or StopRequest"))
		return
	}
	if err := c.validate(req); err != nil {
		refuse(conn, err)
		return
	}
	capability, claims, err := c.admit(req, client)
	if err != nil {
		if req.ConfigurationFingerprint != c.cfg.profile.Fingerprint() {
			c.mtRejectMismatch(mtKey)
		}
		refuse(conn, err)
		return
	}
	sessionID := claims.SessionID
	// After admission: a changed configuration is explained by the
	// mismatch above, not by a credential name it added.
	if err := secretenv.Check(c.cfg.profile, req.Credentials); err != nil {
		refuse(conn, err)
		return
	}
	c.mu.Lock()
	if c.st == stateStopping || c.st == stateFailed || c.sessions.StopRequested() {
		err := c.failErr
		if c.sessions.StopRequested() && c.st != stateFailed {
			err = errStopping // the CLI retries and starts the next generation
		}
		told := c.startFailed && err == c.failErr
		c.mu.Unlock()
		refuse(conn, err)
		if told {
			c.heardOnce.Do(func() { close(c.failureHeard) })
		}
		return
	}
	joined := c.st == stateRunning
	s := &session{id: sessionID, capability: capability, claims: claims, c: c, conn: conn, raw: tconn, tty: req.Tty, mtKey: mtKey}
	c.sessions.Admit(s.id, s, time.Duration(req.LingerMs)*time.Millisecond)
	c.mt.Admit(mtKey, joined)
	c.mu.Unlock()
	defer c.sessions.Done()
	defer c.leave(s)

	// Frames from the CLI are read by one goroutine for the whole session.
	frames := make(chan *lv1.ClientFrame, 16)
	go func() {
		defer close(frames)
		for {
			var f lv1.ClientFrame
			if err := conn.Read(&f); err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					c.log.Debug("session read", "session_id", s.id, "err", err)
				}
				return
			}
			frames <- &f
		}
	}()
	// A starting non-interactive session sends its start to the init as
	// soon as the sandbox is ready, held, so that the init resolves the
	// command while the Domain is published; it runs only at the Go below.
	var held *firstStart
	var hold func()
	if !req.Tty && !joined {
		hold = func() { held = s.holdFirst(req) }
	}
	if !c.waitReady(conn, frames, joined, hold) {
		held.cancel()
		return
	}
	if s.wasStopped() {
		held.cancel()
		s.refuseOrStopped(nil)
		return
	}
	c.mu.Lock()
	failed := c.st != stateRunning
	failErr := c.failErr
	if !failed {
		c.mt.Register(mtKey)
	}
	c.mu.Unlock()
	if failed {
		held.cancel()
		s.refuseOrStopped(failErr)
		return
	}
	// `lazaret run -P`: forwarded by the running helper before the
	// command starts, for this start or join alike.
	if err := c.net.ForwardSessionPorts(req.ForwardPorts, s.id); err != nil {
		held.cancel()
		refuse(conn, err)
		return
	}
	if req.Tty {
		s.runTerminal(req, frames, joined)
		return
	}
	if held != nil {
		if s.goFirst(held, req, frames, joined) {
			return
		}
		s.run(req, frames, joined)
		return
	}
	// The generation's first non-interactive session takes the init's
	// slot however late it is admitted: the starting CLI's own session can
	// reach a loaded coordinator only after the publication.
	if s.startFirst(req, frames, joined) {
		return
	}
	s.run(req, frames, joined)
}

// waitReady forwards start-up progress until the generation is running or
// failed; false if the client went away. A session that joined the running
// generation gets only its warnings (startUpProgress). up, when not nil,
// is called once the sandbox is ready, if that comes first.
func (c *coordinator) waitReady(conn *control.Conn, frames <-chan *lv1.ClientFrame, joined bool, up func()) bool {
	sent := 0
	var sandboxUp <-chan struct{}
	if up != nil {
		sandboxUp = c.sandboxUp
	}
	for {
		c.mu.Lock()
		lines := c.progress[sent:]
		sent = len(c.progress)
		changed := c.changed
		c.mu.Unlock()
		for _, l := range startUpProgress(lines, joined) {
			conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Progress{Progress: &lv1.Progress{Message: l}}})
		}
		select {
		case <-c.ready:
			return true
		case <-sandboxUp:
			sandboxUp = nil
			up()
		case <-changed:
		case f, ok := <-frames:
			if !ok {
				return false
			}
			// A signal before the session runs cancels it.
			if f.GetSignal() != nil {
				return false
			}
			// The CLI sends stdin only after Accepted.
			refuse(conn, errdefs.New(errdefs.ErrInvalid, "stdin frame before the session was accepted"))
			return false
		}
	}
}

// leave removes s from the Domain's sessions, once: a session whose
// command ended leaves before its CLI hears the exit (Exit frame), so that
// once that CLI returns the Domain is already stopping (or lingering) —
// a maintenance command run right after it (`lazaret state reset`)
// waits for the teardown instead of finding the Domain running with no
// session; serveConn's deferred call covers every other end.
func (c *coordinator) leave(s *session) {
	s.leaveOnce.Do(func() {
		defer c.esc.SessionGone(s.id) // after it left c.sessions
		c.mu.Lock()
		defer c.mu.Unlock()
		c.mt.Disconnect(s.mtKey)
		if c.sessions.Leave(s.id, c.st == stateRunning) {
			c.requestTeardownLocked()
		}
	})
}

// lingerExpired ends a linger no session interrupted: the Domain stops as
// after its last session.
func (c *coordinator) lingerExpired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions.LingerEnded() {
		c.requestTeardownLocked()
	}
}

func (s *session) env(req *lv1.RunRequest, u config.GuestUser) []string {
	return s.c.cfg.guest.session(sessionEnv{ID: s.id, Capability: s.capability, User: u, Allowlist: s.c.net.Allowlist(), Env: req.Env, Credentials: req.Credentials})
}

// sessionUser resolves the guest user a session runs as: the profile's
// user, or root when the request asks for it (`lazaret run --user root`).
func (c *coordinator) sessionUser(req *lv1.RunRequest) (config.GuestUser, error) {
	u := c.cfg.profile.SessionUser()
	switch req.User {
	case "", u.Name:
		return u, nil
	case config.RootUser:
		return config.GuestUser{Name: config.RootUser, Home: "/root"}, nil
	}
	return config.GuestUser{}, errdefs.New(errdefs.ErrInvalid, "--user %q: a session runs as the profile's user (%s) or as root (--user root)", req.User, u.Name)
}

// startUpProgress is what a session is shown of the generation's start-up
// progress lines: all of them while it waits for the start; once it joins
// a running generation only the warnings, which still hold, and not the
// start's steps (e.g. "prepare: reusing …"), which it did not wait for.
func startUpProgress(lines []string, joined bool) []string {
	if !joined {
		return lines
	}
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, control.ProgressWarning) {
			out = append(out, l)
		}
	}
	return out
}
