package sessionterm

import (
	"strings"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// loop is the session's serialized event loop. It returns when the session
// closed normally (Exit sent) or the client went away (true).
func loop[A, H any](t *Terminal, frames <-chan *lv1.ClientFrame, admitted bool, routes Routes[A, H]) (clientGone bool) {
	s := t.s
	quit := make(chan struct{})
	defer close(quit)

	// Output pump: PTY master → client, gated by the route.
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		t.pumpOutput(quit)
	}()
	// PTY writer: blocks while the guest does not read its terminal.
	inQ := make(chan []byte, termInputQueue)
	go func() {
		dead := false
		for b := range inQ {
			if !dead {
				if _, err := t.master.Write(b); err != nil {
					dead = true
				}
			}
		}
	}()
	// Group signal worker: one runsc kill at a time, SIGWINCH coalesced.
	sigQ := make(chan unix.Signal, termSignalQueue)
	winch := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case sig, ok := <-sigQ:
				if !ok {
					return
				}
				t.signalGroup(sig)
			case <-winch:
				t.signalGroup(unix.SIGWINCH)
			case <-quit:
				return
			}
		}
	}()
	defer close(inQ)
	defer close(sigQ)

	var pendingIn []byte
	closing := false
	childDone := t.child.Done()
	pumpDone := (<-chan struct{})(pumped)
	for {
		var frameC <-chan *lv1.ClientFrame
		var inC chan<- []byte
		if pendingIn != nil {
			inC = inQ
		} else {
			frameC = frames
		}
		if closing && pumpDone == nil {
			break
		}
		ch := routes.Channels(t.route, closing)
		select {
		case a := <-ch.Ask:
			routes.BeginPrompt(t, a)
		case <-ch.AskDone:
			routes.EndPrompt(t)
		case h := <-ch.Host:
			routes.StartHost(t, h)
		case <-ch.HostDone:
			routes.EndHost(t)
		case <-pumpDone:
			pumpDone = nil
			if !closing {
				// PTY loss starts the same release: no prompt stays shown
				// and no host process outlives it.
				t.log.Debug("session terminal output ended before the exec client exited")
				routes.Close(t)
			}
		case inC <- pendingIn:
			pendingIn = nil
		case <-childDone:
			// Close handshake: no further event is admitted. First the
			// shown prompt is cancelled or the running host process is
			// killed, reaped, audited and answered (serialized before any
			// terminal output); then the pump drains the terminal in order
			// until EOF or the drain deadline.
			childDone = nil
			closing = true
			routes.Close(t)
			t.beginDrain()
		case f, ok := <-frameC:
			if !ok {
				// Lost connection: nothing more is forwarded; the prompt and
				// the host process end first (the final frames go nowhere),
				// then the caller performs the same physical release.
				s.Raw.SetWriteDeadline(t.clock.Now().Add(writeOutTimeout))
				routes.Close(t)
				t.SetRoute(RouteDetached)
				return true
			}
			if routes.Answer(t, f, closing) || routes.CancelHost(t, f, closing) {
				continue
			}
			if closing || !admitted || t.route != RouteSandbox {
				t.log.Debug("terminal event refused", "closing", closing, "admitted", admitted, "route", t.route.String())
				continue
			}
			pendingIn = t.event(f, sigQ, winch)
		}
	}
	st, werr := t.child.Status()
	code, sig := st.ShellCode(), 0
	if !st.Exited {
		sig = int(st.Signal)
	}
	if werr != nil {
		code = 125
	}
	t.d.Timing.Mark("session command exited")
	t.log.Info("session ended", "status", st.String(), "stopped", s.Stopped())
	// The sandbox's stop, if that is what ended the command (it may wait a
	// moment for the supervisor's report).
	var note string
	if s.SandboxStopped != nil {
		if n, nc, ns, ok := s.SandboxStopped(code, sig); ok {
			note, code, sig = n, nc, ns
		}
	}
	// Exactly one Exit, after the last forwarded byte (the pump has ended).
	s.Raw.SetWriteDeadline(t.clock.Now().Add(writeOutTimeout))
	if note != "" {
		// The developer's terminal is raw until Exit: the reason goes on
		// lines of its own.
		crlf := "\r\n" + strings.ReplaceAll(strings.TrimRight(note, "\n"), "\n", "\r\n") + "\r\n"
		s.Conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: lv1.Stream_STREAM_STDERR, Data: []byte(crlf)}}})
	}
	if s.Ending != nil {
		s.Ending()
	}
	s.Conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: int32(code), Signal: int32(sig), Stopped: s.Stopped()}}})
	return false
}

// event handles one admitted client frame; it returns input bytes for the
// PTY writer, if any.
func (t *Terminal) event(f *lv1.ClientFrame, sigQ chan<- unix.Signal, winch chan<- struct{}) []byte {
	queue := func(sig unix.Signal) {
		select {
		case sigQ <- sig:
		default:
			t.log.Warn("terminal signal dropped: queue full", "signal", unix.SignalName(sig))
		}
	}
	switch {
	case f.GetStdin() != nil:
		if d := f.GetStdin().GetData(); len(d) > 0 {
			return d
		}
	case f.GetResize() != nil:
		size := sizeOf(f.GetResize().GetSize())
		// A size the terminal already has changes nothing, and the kernel
		// signals no SIGWINCH for it: neither do we (each is a runsc kill).
		// The CLI sends its size once accepted, usually the one it started
		// with.
		unchanged := false
		if cur, err := t.master.Size(); err == nil && cur == size {
			unchanged = true
		}
		if err := t.master.Resize(size); err != nil {
			t.log.Warn("resize refused", "size", size.String(), "err", err)
			return nil
		}
		if unchanged {
			return nil
		}
		select {
		case winch <- struct{}{}:
		default: // a SIGWINCH is already pending
		}
	case f.GetInterrupt() != nil:
		queue(unix.SIGINT)
	case f.GetQuit() != nil:
		queue(unix.SIGQUIT)
	case f.GetSuspend() != nil:
		queue(unix.SIGTSTP)
	case f.GetContinue() != nil:
		queue(unix.SIGCONT)
	case f.GetStdinClose() != nil:
		// A terminal has no end of input: EOF is the guest's VEOF byte.
	default:
		t.log.Warn("client frame refused in an interactive session")
	}
	return nil
}
