package runverb

// The client side of an interactive session (spec §3.3, DX-5): the CLI puts
// its own terminal in raw mode and relays bytes and events; it never holds
// the sandbox PTY (the Host Coordinator does).
//
//   - Every keystroke, Ctrl-C, Ctrl-\ and Ctrl-Z included, is input: the
//     guest's line discipline signals its foreground job.
//   - SIGINT and SIGQUIT sent to the CLI from outside become the Interrupt
//     and Quit events (the coordinator signals the session's guest process
//     group). SIGTERM and SIGHUP end the CLI: it restores the terminal and
//     closes the connection, and the coordinator releases the session.
//   - SIGWINCH sends the new size (Resize).
//   - Suspension of the CLI itself is local: SIGTSTP sent to it, or the
//     escape "~^Z" typed at the start of a line, restores the terminal and
//     stops the CLI; on SIGCONT it re-enters raw mode and sends the current
//     size. "~." at the start of a line disconnects; "~~" sends one "~".
//   - While a host escalation prompt is open its answer is read here; while
//     an approved host command runs (HostProcessStarted … HostProcessEnded)
//     no keystroke is sent, the command's status is shown and Ctrl-C
//     cancels it (HostProcessCancel). The escapes keep working.
//   - The terminal is restored on every exit path the process survives.

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/containerd/console"
	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/pty"
	"github.com/lazaret/lazaret/pkg/termtext"
)

// defaultShell is the command of `lazaret run` with no command on a
// terminal: the image's bash as a login shell when it has one, else its sh.
var defaultShell = []string{"/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l"}

// useTerminal reports whether a session should be interactive: both stdin
// and stdout are terminals (stderr joins the merged terminal stream).
func useTerminal() bool { return IsTerminal(0) && IsTerminal(1) }

// windowSize reads the size of the terminal on fd.
func windowSize(fd int) (*lv1.WindowSize, error) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return nil, os.NewSyscallError("ioctl TIOCGWINSZ", err)
	}
	if ws.Row == 0 || ws.Col == 0 {
		// A terminal that reports no size (e.g. a fresh PTY): use the
		// classic default rather than refuse.
		ws.Row, ws.Col = 24, 80
	}
	return &lv1.WindowSize{Rows: uint32(ws.Row), Cols: uint32(ws.Col), XPixels: uint32(ws.Xpixel), YPixels: uint32(ws.Ypixel)}, nil
}

// escapeAction is what the input escape filter found.
type escapeAction int

const (
	escapeNone escapeAction = iota
	escapeSuspend
	escapeDisconnect
)

// escapeFilter recognizes ssh-style escapes: "~" right after a line start
// (session start, CR or LF) followed by ^Z (suspend the CLI) or "." (end the
// session); "~~" sends one "~"; "~" followed by anything else is sent as is.
type escapeFilter struct {
	midLine bool // not at a line start
	tilde   bool // a line-start "~" is held back
}

// feed filters one read: it returns the bytes to send and, when an escape
// was found, the action and the input that followed it (to be fed after the
// action).
func (e *escapeFilter) feed(in []byte) (out []byte, act escapeAction, rest []byte) {
	out = make([]byte, 0, len(in)+1)
	for i, b := range in {
		if e.tilde {
			e.tilde = false
			switch b {
			case 0x1a: // ^Z
				e.midLine = false
				return out, escapeSuspend, in[i+1:]
			case '.':
				return out, escapeDisconnect, in[i+1:]
			case '~':
				out = append(out, '~')
				e.midLine = true
				continue
			default:
				out = append(out, '~')
			}
		} else if b == '~' && !e.midLine {
			e.tilde = true
			continue
		}
		out = append(out, b)
		e.midLine = b != '\r' && b != '\n'
	}
	return out, escapeNone, nil
}

// ttyClient is the client end of one interactive session.
type ttyClient struct {
	sess    *client.Session
	term    *os.File // the terminal cons wraps (stdin)
	cons    console.Console
	raw     bool
	self    *pidfs.Handle
	escapes chan escapeAction
	prompts *escalationPrompts // host escalation prompts (prompt.go)
}

func (c *ttyClient) enterRaw() error {
	if c.raw {
		return nil
	}
	if err := c.cons.SetRaw(); err != nil {
		return fmt.Errorf("set the terminal to raw mode: %w", err)
	}
	c.raw = true
	// containerd/console's raw mode keeps output processing (OPOST, so
	// ONLCR) on. The guest's own terminal already applied the guest's
	// output modes; processing the bytes again here would turn a raw-mode
	// guest's bare LF into CR LF and its CR LF into CR CR LF, and costs the
	// host terminal a line-by-line write path. Full raw mode (cfmakeraw, as
	// ssh does) hands the bytes to the terminal as the guest produced them;
	// restore puts back the saved modes, OPOST included.
	if err := pty.MakeRaw(c.term); err != nil {
		return fmt.Errorf("set the terminal to raw mode: %w", err)
	}
	return nil
}

// leave ends an abnormal exit (signal, disconnect, lost coordinator) on a
// fresh line, so what the outer shell prints next is not appended to the
// guest's last line.
func (c *ttyClient) leave() {
	if c.raw {
		os.Stdout.Write([]byte("\r\n"))
	}
	c.restore()
}

func (c *ttyClient) restore() {
	if c.raw {
		c.cons.Reset()
		c.raw = false
	}
}

func (c *ttyClient) sendSize() {
	if ws, err := windowSize(0); err == nil {
		c.sess.Resize(ws)
	}
}

// suspend restores the terminal and stops this process; SIGCONT resumes it
// (handled by the caller's loop).
func (c *ttyClient) suspend() {
	c.restore()
	if c.self != nil {
		c.self.Signal(unix.SIGSTOP) // through our own pidfd, never by number
	}
}

// relayInput copies the terminal's bytes to the session, interpreting
// escapes. It runs until stdin fails.
func (c *ttyClient) relayInput() {
	var esc escapeFilter
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		in := buf[:n]
		if pin := c.prompts.input(); pin != nil && n > 0 {
			// An escalation prompt owns the terminal: nothing reaches the
			// sandbox.
			pin <- append([]byte(nil), in...)
			in = nil
		}
		for len(in) > 0 {
			out, act, rest := esc.feed(in)
			// While a host command runs the coordinator takes no input for
			// the sandbox: none is sent (Ctrl-C cancels the command).
			if len(out) > 0 && !c.prompts.hostInput(out) {
				if c.sess.Stdin(out) != nil {
					return
				}
			}
			if act != escapeNone {
				c.escapes <- act
			}
			in = rest
		}
		if err != nil {
			// The terminal went away (hang-up): end like SIGHUP.
			c.escapes <- escapeDisconnect
			return
		}
	}
}

// terminalSession runs the CLI's side of one interactive Client Session:
// the terminal in raw mode, input with its escapes, signals, resizes and
// escalation prompts.
func terminalSession(sess *client.Session, sigs <-chan os.Signal) *client.End {
	cons, err := console.ConsoleFromFile(os.Stdin)
	if err != nil {
		return &client.End{Err: errdefs.Mark(fmt.Errorf("stdin terminal: %w", err), errdefs.ErrInvalid)}
	}
	// The output writer keeps its processor while the user's terminal is
	// full (rawio.TerminalWriter); a second one keeps input, signals and
	// the session's events running meanwhile even on a single CPU.
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	c := &ttyClient{sess: sess, term: os.Stdin, cons: cons, escapes: make(chan escapeAction, 1)}
	c.prompts = &escalationPrompts{c: c, anchor: sess.Anchor()}
	// Restored on every return (normal exit, error, signal, lost
	// coordinator) and on a panic unwinding through here.
	defer c.restore()
	if self, err := pidfs.Open(os.Getpid()); err == nil {
		c.self = self
		defer self.Close()
	}
	tsigs := make(chan os.Signal, 8)
	signal.Notify(tsigs, syscall.SIGWINCH, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(tsigs)

	// Output is written only once the terminal is in raw mode (or raw
	// mode failed and the session ends): HoldOutput. The host command's
	// status lines are written where they occur in the output: the held
	// PTY output follows its end line.
	sess.Start(client.SessionOptions{Output: writeOutput, Inline: c.prompts.inline, HoldOutput: true})
	stderrTTY := IsTerminal(2)
	accepted := false
	for {
		select {
		case sig := <-sigs:
			n := sig.(syscall.Signal)
			if !accepted {
				return &client.End{Code: 128 + int(n)}
			}
			if !sess.Forward(n) {
				// SIGTERM, SIGHUP: leave; the coordinator releases the session
				c.leave()
				return &client.End{Code: 128 + int(n)}
			}
		case sig := <-tsigs:
			switch sig {
			case syscall.SIGWINCH:
				if accepted {
					c.sendSize()
				}
			case syscall.SIGTSTP:
				c.suspend()
			case syscall.SIGCONT:
				if accepted {
					if err := c.enterRaw(); err != nil {
						return &client.End{Err: err}
					}
					c.sendSize()
				}
			}
		case act := <-c.escapes:
			switch act {
			case escapeSuspend:
				c.suspend()
			case escapeDisconnect:
				c.leave()
				fmt.Fprintln(os.Stderr, "lazaret: disconnected; the session is closed")
				return &client.End{Code: 128 + int(syscall.SIGHUP)}
			}
		case ev := <-sess.Events():
			if e := ev.End; e != nil {
				switch {
				case e.Retry:
				case e.Lost:
					c.leave()
				case e.Err != nil:
					c.restore()
				default:
					runTiming.Mark("exit status received")
					if e.Stopped {
						c.leave() // the terminal restored before the message
						fmt.Fprintln(os.Stderr, StoppedMessage)
						return &client.End{Code: ExitStopped}
					}
				}
				return e
			}
			switch f := ev.Frame; {
			case f.GetProgress() != nil:
				if stderrTTY {
					eol := "\n"
					if c.raw { // no output processing: the line ends itself
						eol = "\r\n"
					}
					fmt.Fprintf(os.Stderr, "lazaret: %s%s", termtext.Line(f.GetProgress().GetMessage()), eol)
				}
			case f.GetAccepted() != nil:
				runTiming.Mark("session accepted")
				first := !accepted
				accepted = true
				err := c.enterRaw()
				if first {
					sess.OutputReady()
					// From here on this CLI only relays: give back
					// what starting the session needed.
					idlemem.SettleSoon(nil)
				}
				if err != nil {
					return &client.End{Err: err}
				}
				// The size may have changed while the Domain started.
				c.sendSize()
				go c.relayInput()
			case f.GetEscalationPrompt() != nil:
				c.prompts.show(f.GetEscalationPrompt())
			case f.GetEscalationPromptEnd() != nil:
				c.prompts.ended(f.GetEscalationPromptEnd())
			}
		}
	}
}
