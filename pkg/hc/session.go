package hc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/network"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/rawio"
	"github.com/lazaret/lazaret/pkg/secretenv"
	"github.com/lazaret/lazaret/pkg/trust"
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
	child      *proc.Child
	tty        bool // interactive: escalation prompts go to its terminal
	// killed: the exec client is killed as soon as it exists (teardown or
	// stop reached the session before its command started); stopped: by
	// `lazaret stop`, which the Exit frame reports.
	killed, stopped bool
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

// setChild records the session's exec client, killing it at once when the
// session was killed while the command started.
func (s *session) setChild(child *proc.Child) {
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
		conn, err := c.listener.AcceptUnix()
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
	if r.DomainId != string(c.paths.ID) || r.Profile != c.prof {
		return errdefs.New(errdefs.ErrRefused, "request for Domain %s profile %q reached Domain %s profile %q", r.DomainId, r.Profile, c.paths.ID, c.prof)
	}
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return errdefs.New(errdefs.ErrInvalid, "empty command")
	}
	if r.WorkspaceSubdir != "" && (path.IsAbs(r.WorkspaceSubdir) || path.Clean(r.WorkspaceSubdir) != r.WorkspaceSubdir || strings.HasPrefix(r.WorkspaceSubdir, "..")) {
		return errdefs.New(errdefs.ErrInvalid, "bad workspace subdirectory %q", r.WorkspaceSubdir)
	}
	if err := validateTerminal(r); err != nil {
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
	cred, err := peerCred(raw)
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
		if req.ConfigurationFingerprint != c.profile.Fingerprint() {
			c.mtRejectMismatch(mtKey)
		}
		refuse(conn, err)
		return
	}
	sessionID := claims.SessionID
	// After admission: a changed configuration is explained by the
	// mismatch above, not by a credential name it added.
	if err := secretenv.Check(c.profile, req.Credentials); err != nil {
		refuse(conn, err)
		return
	}
	c.mu.Lock()
	if c.st == stateStopping || c.st == stateFailed || c.stopRequested {
		err := c.failErr
		if c.stopRequested && c.st != stateFailed {
			err = errStopping // the CLI retries and starts the next generation
		}
		c.mu.Unlock()
		refuse(conn, err)
		return
	}
	joined := c.st == stateRunning
	c.active++
	c.everHad = true
	if l := time.Duration(req.LingerMs) * time.Millisecond; l > c.linger {
		c.linger = l
	}
	c.endLingerLocked()
	c.mtAdmitLocked(mtKey, joined)
	s := &session{id: sessionID, capability: capability, claims: claims, c: c, conn: conn, raw: tconn, tty: req.Tty, mtKey: mtKey}
	c.sessions[s.id] = s
	c.sessionWG.Add(1)
	c.mu.Unlock()
	defer c.sessionWG.Done()
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
	if !c.waitReady(conn, frames) {
		return
	}
	if s.wasStopped() {
		s.refuseOrStopped(nil)
		return
	}
	c.mu.Lock()
	failed := c.st != stateRunning
	failErr := c.failErr
	if !failed {
		c.mtRegisterLocked(mtKey)
	}
	c.mu.Unlock()
	if failed {
		s.refuseOrStopped(failErr)
		return
	}
	// `lazaret run -P`: forwarded by the running helper before the
	// command starts, for this start or join alike.
	if err := c.net.ForwardSessionPorts(req.ForwardPorts, s.id); err != nil {
		refuse(conn, err)
		return
	}
	if req.Tty {
		s.runTerminal(req, frames, joined)
		return
	}
	s.run(req, frames, joined)
}

// waitReady forwards start-up progress until the generation is running or
// failed; false if the client went away.
func (c *coordinator) waitReady(conn *control.Conn, frames <-chan *lv1.ClientFrame) bool {
	sent := 0
	for {
		c.mu.Lock()
		lines := c.progress[sent:]
		sent = len(c.progress)
		changed := c.changed
		c.mu.Unlock()
		for _, l := range lines {
			conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Progress{Progress: &lv1.Progress{Message: l}}})
		}
		select {
		case <-c.ready:
			return true
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

func (c *coordinator) leave(s *session) {
	defer c.esc.SessionGone(s.id) // after it left c.sessions
	c.mu.Lock()
	delete(c.sessions, s.id)
	c.mtDisconnectLocked(s.mtKey)
	c.active--
	last := c.active == 0
	switch {
	case last && c.linger > 0 && c.st == stateRunning && !c.stopRequested:
		c.lingerUntil = time.Now().Add(c.linger)
		c.lingerTimer = time.AfterFunc(c.linger, c.lingerExpired)
		c.log.Info("last session left: the Domain lingers", "linger", c.linger.String())
	case last:
		c.log.Info("last session left")
		c.requestTeardownLocked()
	}
	c.mu.Unlock()
}

// lingerExpired ends a linger no session interrupted: the Domain stops as
// after its last session.
func (c *coordinator) lingerExpired() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active == 0 && !c.lingerUntil.IsZero() && !time.Now().Before(c.lingerUntil) {
		c.log.Info("linger ended with no session", "linger", c.linger.String())
		c.lingerTimer, c.lingerUntil = nil, time.Time{}
		c.requestTeardownLocked()
	}
}

// endLingerLocked cancels a linger (a session joined). c.mu is held.
func (c *coordinator) endLingerLocked() {
	if c.lingerTimer != nil {
		c.lingerTimer.Stop()
		c.log.Info("a session joined the lingering Domain", "left", time.Until(c.lingerUntil).Round(time.Second).String())
	}
	c.lingerTimer, c.lingerUntil = nil, time.Time{}
}

func (s *session) env(req *lv1.RunRequest, u config.GuestUser) []string {
	env := append([]string{}, s.c.baseEnv...)
	if !u.IsRoot() {
		// The session user's identity, unless the profile sets its own.
		for k, v := range map[string]string{"HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name} {
			if _, set := s.c.profile.Env[k]; !set {
				env = setEnv(env, k, v)
			}
		}
	}
	if s.c.net.Allowlist() {
		// The session's label on its proxied requests (denial log, asks).
		for k, v := range network.ProxyEnv(network.SessionLabel(s.id)) {
			if _, set := s.c.profile.Env[k]; !set {
				env = setEnv(env, k, v)
			}
		}
	}
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	// The session's credentials (env_pass, secrets), checked against the
	// profile's names at admission; no log line or record holds them.
	for k, v := range req.Credentials {
		env = setEnv(env, k, v)
	}
	// The Session Request Capability travels with guest execution: the
	// escalation client presents it to route requests to this session.
	return append(env, "LAZARET_SESSION_ID="+s.id, "LAZARET_SESSION_CAPABILITY="+base64.StdEncoding.EncodeToString(s.capability))
}

// sessionUser resolves the guest user a session runs as: the profile's
// user, or root when the request asks for it (`lazaret run --user root`).
func (c *coordinator) sessionUser(req *lv1.RunRequest) (config.GuestUser, error) {
	u := c.profile.SessionUser()
	switch req.User {
	case "", u.Name:
		return u, nil
	case config.RootUser:
		return config.GuestUser{Name: config.RootUser, Home: "/root"}, nil
	}
	return config.GuestUser{}, errdefs.New(errdefs.ErrInvalid, "--user %q: a session runs as the profile's user (%s) or as root (--user root)", req.User, u.Name)
}

// run starts the session's command and relays it until it exits.
func (s *session) run(req *lv1.RunRequest, frames <-chan *lv1.ClientFrame, joined bool) {
	c := s.c
	log := c.log.With("session_id", s.id)
	cwd := ocispec.WorkspaceDir
	if req.WorkspaceSubdir != "" {
		cwd = path.Join(cwd, req.WorkspaceSubdir)
	}
	u, err := c.sessionUser(req)
	if err != nil {
		refuse(s.conn, err)
		return
	}
	// runsc exec starts the command itself (no launcher process in the
	// sandbox); stderrGate and launchFailure give a command that cannot
	// run the shell's 127/126 and the product's message.
	pj, err := ocispec.ProcessJSON(ocispec.Process{Args: req.Argv, Env: s.env(req, u), Cwd: cwd, UID: u.UID, GID: u.GID, Rlimits: c.rlimits()})
	if err != nil {
		refuse(s.conn, errdefs.Mark(err, errdefs.ErrInvalid))
		return
	}
	pjFile := filepath.Join(c.sessionDir(), s.id+".json")
	if err := os.WriteFile(pjFile, pj, 0o600); err != nil {
		refuse(s.conn, err)
		return
	}
	defer os.Remove(pjFile)
	var inR, inW *os.File
	if req.Stdin {
		if inR, inW, err = os.Pipe(); err != nil {
			refuse(s.conn, err)
			return
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		refuse(s.conn, err)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		refuse(s.conn, err)
		return
	}
	pidFile := filepath.Join(c.sessionDir(), s.id+".pid")
	defer os.Remove(pidFile)
	argv := c.rt.Exec(pjFile, pidFile, c.container)
	c.timing.Mark("session admitted; starting runsc exec")
	child, err := c.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "session_exec",
		ExecStop: true, // no wrapper re-exec of lazaret-hc on the session start path
		Target:   proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/", Files: []*os.File{inR, outW, errW}, Setsid: true},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			log.Debug("staged ownership", "slot", "session_exec", "identity", id.String())
			return nil
		},
	})
	outW.Close()
	errW.Close()
	if inR != nil {
		inR.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		refuse(s.conn, fmt.Errorf("start session command: %w", err))
		return
	}
	s.setChild(child)
	c.timing.Mark("session started")
	log.Info("session started", "argv0", req.Argv[0], "joined", joined)
	s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Accepted{Accepted: &lv1.Accepted{SessionId: s.id, Generation: c.generation, Joined: joined, SessionCapability: s.capability}}})
	idlemem.SettleSoon(log) // the start is done; HC goes back to relaying

	var outWG sync.WaitGroup
	send := func(stream lv1.Stream) func([]byte) {
		return func(b []byte) {
			s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: stream, Data: append([]byte(nil), b...)}}})
		}
	}
	gate := &stderrGate{write: send(lv1.Stream_STREAM_STDERR), launched: launchedByPIDFile(pidFile)}
	relay := func(r *os.File, out func([]byte)) {
		defer outWG.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				out(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}
	outWG.Add(2)
	go relay(outR, send(lv1.Stream_STREAM_STDOUT))
	go relay(errR, gate.Write)

	// Stdin is written by its own goroutine so a guest that does not read
	// cannot block signal delivery.
	stdinQ := make(chan []byte, 64)
	go func() {
		for b := range stdinQ {
			if inW == nil {
				continue
			}
			if b == nil {
				inW.Close()
				inW = nil
				continue
			}
			if _, err := inW.Write(b); err != nil {
				inW.Close()
				inW = nil
			}
		}
		if inW != nil {
			inW.Close()
		}
	}()
	// Group events (Interrupt, Quit, Suspend, Continue) are delivered in
	// order by one worker, through a bounded queue.
	groupQ := make(chan unix.Signal, groupSignalQueue)
	defer close(groupQ)
	go func() {
		for sig := range groupQ {
			s.signalGuestGroup(pidFile, sig)
		}
	}()
	clientGone := false
loop:
	for {
		select {
		case <-child.Done():
			break loop
		case f, ok := <-frames:
			if !ok {
				if !clientGone {
					clientGone = true
					log.Info("client connection lost: stopping the session command")
					go s.signalGuest(pidFile, unix.SIGTERM)
					go func() {
						select {
						case <-child.Done():
						case <-time.After(closeGrace):
							child.Signal(unix.SIGKILL)
						}
					}()
				}
				frames = nil
				continue
			}
			switch {
			case f.GetStdin() != nil:
				if d := f.GetStdin().GetData(); len(d) > 0 {
					stdinQ <- d
				}
			case f.GetStdinClose() != nil:
				stdinQ <- nil
			case f.GetSignal() != nil:
				sig := unix.Signal(f.GetSignal().GetSignal())
				switch sig {
				case unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT:
					// Without a terminal, runsc exec forwards no signals:
					// deliver it to the exact guest process.
					go s.signalGuest(pidFile, sig)
				default:
					log.Warn("refused signal from client", "signal", int(sig))
				}
			default:
				if sig, ok := groupEvent(f); ok {
					select {
					case groupQ <- sig:
					default:
						log.Warn("group signal dropped: queue full", "signal", unix.SignalName(sig))
					}
				}
			}
		}
	}
	close(stdinQ)
	st, werr := child.Status()
	// Drain output until EOF or a bounded deadline: a daemonized guest
	// process may keep the pipes open.
	drained := make(chan struct{})
	go func() { outWG.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		outR.Close()
		errR.Close()
		<-drained
	}
	outR.Close()
	errR.Close()
	code, sig := st.ShellCode(), 0
	if !st.Exited {
		sig = int(st.Signal)
	}
	if werr != nil {
		code = 125
	}
	if held, launched := gate.Close(); !launched {
		if status, msg, ok := launchFailure(req.Argv[0], code, held); ok {
			log.Info("session command cannot run", "argv0", req.Argv[0], "status", status, "runsc", strings.TrimSpace(string(held)))
			code, held = status, []byte(msg)
		}
		if len(held) > 0 {
			gate.write(held)
		}
	}
	c.timing.Mark("session command exited")
	log.Info("session ended", "status", st.String(), "stopped", s.wasStopped())
	if sig == int(unix.SIGKILL) || code == 128+int(unix.SIGKILL) {
		// SIGKILLed: say so if it was the sandbox that stopped (a limit).
		if note := c.failureNote(time.Second); note != "" && !s.wasStopped() {
			s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: lv1.Stream_STREAM_STDERR, Data: []byte(note)}}})
		}
	}
	s.conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: int32(code), Signal: int32(sig), Stopped: s.wasStopped()}}})
}

// groupSignalQueue bounds a non-interactive session's pending group events.
const groupSignalQueue = 8

// groupEvent maps the Interrupt, Quit, Suspend and Continue events to the
// signal for the session's guest process group.
func groupEvent(f *lv1.ClientFrame) (unix.Signal, bool) {
	switch {
	case f.GetInterrupt() != nil:
		return unix.SIGINT, true
	case f.GetQuit() != nil:
		return unix.SIGQUIT, true
	case f.GetSuspend() != nil:
		return unix.SIGTSTP, true
	case f.GetContinue() != nil:
		return unix.SIGCONT, true
	}
	return 0, false
}

// signalGuest delivers sig to the session's guest process, named by the pid
// runsc wrote with --internal-pid-file (a pid in the sandbox's own PID
// namespace: runsc resolves it there, never on the host).
func (s *session) signalGuest(pidFile string, sig unix.Signal) { s.signalGuestPID(pidFile, sig, false) }

// signalGuestGroup delivers sig to the session's guest process group: a
// `runsc exec` process leads its own process group (and session) in the
// sandbox, so the group ID is the pid from --internal-pid-file.
func (s *session) signalGuestGroup(pidFile string, sig unix.Signal) {
	s.signalGuestPID(pidFile, sig, true)
}

func (s *session) signalGuestPID(pidFile string, sig unix.Signal, group bool) {
	c := s.c
	var pid int
	for i := 0; i < 50; i++ {
		b, err := os.ReadFile(pidFile)
		if err == nil {
			if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid); err == nil && pid > 0 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid <= 0 {
		c.log.Warn("no guest pid to signal", "session_id", s.id, "signal", unix.SignalName(sig))
		return
	}
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	if group {
		c.runscQuiet(c.rt.KillGroup(c.container, name, pid))
		return
	}
	c.runscQuiet(c.rt.KillPID(c.container, name, pid))
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	err = rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil {
		return nil, err
	}
	return cred, cerr
}
