package sessionterm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/pty"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/timing"
)

// Bounds of one interactive session.
const (
	// termFrameMax bounds one PTY read (aggregated until EAGAIN), sent as
	// one Output frame. With the frame's length header and protobuf prefix
	// (at most control.OutputHeadroom bytes) a full frame is at most 64 KiB,
	// so it goes out as four TLS records, never with a fifth record of a
	// few bytes (one more socket write here, one more record in the CLI).
	termFrameMax = 4*tlsRecordMax - control.OutputHeadroom
	// tlsRecordMax is the largest TLS plaintext record (RFC 8446 §5.1).
	tlsRecordMax    = 16 << 10
	termInputQueue  = 64              // input chunks waiting for the PTY writer
	termSignalQueue = 8               // group signals waiting for runsc kill
	writeOutTimeout = 5 * time.Second // final frames to a client that stopped reading
)

// IdentifyTimeout bounds the wait for the guest leader's pid: an
// interactive session's events (and its escalation prompts) are admitted
// at the latest this long after its exec client started.
const IdentifyTimeout = 10 * time.Second

// ExitAfterAbsence bounds the wait for the exec client of a command found
// absent from the guest during its identification: a command that exits
// at once is gone before its client has collected its status and exited.
const ExitAfterAbsence = 5 * time.Second

// endedUnidentified reports whether identification failed with err because
// the command had already ended: its exec client has exited, or exits
// within ExitAfterAbsence of the command being found absent (errdefs.
// ErrUnavailable). Any other failure is one only if the client still runs.
func (t *Terminal) endedUnidentified(child *proc.Child, err error) bool {
	if !errors.Is(err, errdefs.ErrUnavailable) {
		select {
		case <-child.Done():
			return true
		default:
			return false
		}
	}
	select {
	case <-child.Done():
		return true
	case <-t.clock.After(ExitAfterAbsence):
		return false
	}
}

// Timeouts of the close and the release.
var (
	// DrainTimeout bounds the drain of PTY output after the exec client
	// exited (a daemonized guest process may keep the terminal open).
	DrainTimeout = 2 * time.Second
	// CloseGrace is the grace after SIGHUP and after SIGTERM to the guest
	// group before the next signal.
	CloseGrace = 2 * time.Second
)

// clock is the time source of deadlines and grace periods (injected so the
// release sequence can be driven in tests).
type clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Validate checks the terminal fields of a RunRequest.
func Validate(r *lv1.RunRequest) error {
	if !r.Tty {
		if r.WindowSize != nil {
			return errdefs.New(errdefs.ErrInvalid, "window size given for a session without a terminal")
		}
		return nil
	}
	if r.WindowSize == nil {
		return errdefs.New(errdefs.ErrInvalid, "interactive session without a window size")
	}
	return sizeOf(r.WindowSize).Validate()
}

func sizeOf(w *lv1.WindowSize) pty.Size {
	return pty.Size{Rows: w.GetRows(), Cols: w.GetCols(), XPixels: w.GetXPixels(), YPixels: w.GetYPixels()}
}

// Broker starts processes with exact ownership (*proc.Broker).
type Broker interface {
	Acquire(ctx context.Context, spec proc.AcquireSpec) (*proc.Child, error)
	Output(ctx context.Context, name string, cmd proc.Command, limit int64) (stdout, stderr []byte, st pidfs.ExitStatus, err error)
}

// Domain is what a Session Terminal uses of its Domain's running
// generation: the broker, runsc and the generation's container, and the
// store that records it.
type Domain struct {
	Broker     Broker
	Runtime    runsc.Runtime
	Container  string
	Generation uint64
	// Dir holds the sessions' process documents and pid files.
	Dir string
	// BaseEnv and Rlimits make the process document of a guest probe.
	BaseEnv  []string
	Rlimits  ocispec.Rlimits
	Recorder Recorder
	Timing   *timing.Recorder // nil unless timing is traced
	Log      *slog.Logger
	// Settle, when set, runs once a session's start is done (the client
	// was told it runs): the process may give back start-up memory.
	Settle func(*slog.Logger)
}

// Session is the Client Session an interactive terminal serves.
type Session struct {
	ID         string
	Capability []byte // the Session Request Capability, sent in Accepted
	Joined     bool   // the session joined a running generation
	Argv0      string
	Size       *lv1.WindowSize
	Conn       *control.Conn
	// Raw is the connection under Conn: a write deadline bounds the final
	// frames to a client that stopped reading.
	Raw net.Conn
	// Process returns the command's process document (terminal: true);
	// it is called once the Intent is recorded.
	Process func() ([]byte, error)
	// Started hands over the exec client as soon as it exists (stop and
	// Domain teardown kill it).
	Started func(*proc.Child)
	// Stopped reports whether `lazaret stop` ended the session (Exit says
	// so).
	Stopped func() bool
	// SandboxStopped, when set, is asked about the command's end: when it
	// was the sandbox stopping under the session (a limit, a crash), the
	// reason for the developer's terminal and the status to report.
	SandboxStopped func(code, sig int) (note string, newCode, newSig int, ok bool)
	// Refuse sends the session's error frame.
	Refuse func(error)
	// Ending, when set, runs once the command's end is known, just before
	// the Exit frame (the coordinator lets the session leave the Domain
	// first).
	Ending func()
}

// Terminal is one interactive session's physical terminal, as its route
// handlers see it.
type Terminal struct {
	d      Domain
	s      Session
	log    *slog.Logger
	clock  clock
	drain  time.Duration // DrainTimeout but in tests
	master *pty.Master
	child  *proc.Child
	id     Identity
	// identified: the guest leader and group are known (Running reached).
	identified bool
	route      Route
	gate       *outputGate // open while route is RouteSandbox
}

// Log is the session's logger.
func (t *Terminal) Log() *slog.Logger { return t.log }

// Route is the session's current route.
func (t *Terminal) Route() Route { return t.route }

// RouteName names the session's current route (for logs).
func (t *Terminal) RouteName() string { return t.route.String() }

// Send writes a frame to the session's client.
func (t *Terminal) Send(f *lv1.ServerFrame) error { return t.s.Conn.Write(f) }

// Run runs an interactive session until it closes and its terminal is
// released. routes registers the session's escalation routing once its
// events are admitted or not (a command that ended before it was
// identified).
func Run[A, H any](d Domain, s Session, frames <-chan *lv1.ClientFrame, routes func(admitted bool) Routes[A, H]) {
	ctx := context.Background()
	t := &Terminal{d: d, s: s, log: d.Log.With("session_id", s.ID, "tty", true), clock: realClock{}, drain: DrainTimeout}
	t.id = Identity{SessionID: s.ID, Generation: d.Generation, Container: d.Container}
	// 1. Intent.
	if err := d.Recorder.RecordIntent(ctx, s.ID, d.Generation); err != nil {
		s.Refuse(err)
		return
	}
	fail := func(err error) {
		s.Refuse(err)
		t.release(ctx)
	}
	pj, err := s.Process()
	if err != nil {
		fail(err)
		return
	}
	pjFile := filepath.Join(d.Dir, s.ID+".json")
	if err := os.WriteFile(pjFile, pj, 0o600); err != nil {
		fail(err)
		return
	}
	defer os.Remove(pjFile)
	pidFile := filepath.Join(d.Dir, s.ID+".pid")
	defer os.Remove(pidFile)
	// 2. PTY and the exec wrapper through the causal broker.
	master, slave, err := pty.Open(sizeOf(s.Size))
	if err != nil {
		fail(fmt.Errorf("allocate session terminal: %w", err))
		return
	}
	t.master = master
	if n, err := master.Index(); err == nil {
		t.id.PTY = "pts/" + strconv.Itoa(n)
	}
	// The launcher reports the guest leader's identity on this pipe
	// (ocispec.IdentityFD) just before it execs the command.
	identR, identW, err := os.Pipe()
	if err != nil {
		slave.Close() // the release closes the master
		fail(fmt.Errorf("allocate the session's identity pipe: %w", err))
		return
	}
	defer identR.Close()
	argv := d.Runtime.Exec(pjFile, pidFile, d.Container, ocispec.IdentityFD)
	d.Timing.Mark("session admitted; starting runsc exec")
	child, err := d.Broker.Acquire(ctx, proc.AcquireSpec{
		Slot:     "session_exec",
		ExecStop: true, // no wrapper re-exec of lazaret-hc on the session start path
		Target: proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: "/",
			Files: []*os.File{slave, slave, slave, identW}, Setsid: true, Setctty: true},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			t.log.Debug("staged ownership", "slot", "session_exec", "identity", id.String())
			if err := d.Recorder.RecordStaged(ctx, s.ID, id); err != nil {
				return err
			}
			// Accepted goes out while the exec client waits at its exec
			// stop, before the command can run: a CLI that loses its
			// coordinator before Accepted starts or joins again
			// (client.End.Retry), which is safe only then. Its events wait
			// unread until the guest group is identified (below).
			t.Send(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Accepted{Accepted: &lv1.Accepted{SessionId: s.ID, Generation: d.Generation, Joined: s.Joined, SessionCapability: s.Capability}}})
			return nil
		},
	})
	slave.Close() // the exec client holds the only slave descriptors now
	identW.Close()
	if err != nil {
		fail(fmt.Errorf("start session command: %w", err))
		return
	}
	t.child = child
	t.id.ExecClient = child.Identity()
	s.Started(child)
	// 3. The guest process group and its leader.
	admitted := false
	if err := t.identify(pidFile, identR); err != nil {
		if !t.endedUnidentified(child, err) {
			fail(fmt.Errorf("identify the session's guest process group: %w", err))
			return
		}
		// The command ended before it could be identified (e.g. a command
		// that exits at once): no event is ever admitted; its output and
		// status are still delivered.
		t.log.Debug("session ended before its guest group was identified", "err", err)
	} else {
		// 4. One transaction to Running; 5. only then events are admitted.
		if err := d.Recorder.RecordRunning(ctx, t.id); err != nil {
			fail(err)
			return
		}
		failpoint.Hit("lazaret-hc:session-running") // the command runs
		admitted = true
	}
	t.gate = newOutputGate()
	t.SetRoute(RouteSandbox)
	d.Timing.Mark("session started")
	t.log.Info("session started", "argv0", s.Argv0, "joined", s.Joined, "pty", t.id.PTY, "size", sizeOf(s.Size).String(),
		"guest_pid", t.id.GuestLeaderPID, "guest_pgid", t.id.GuestPGID, "guest_start", t.id.GuestLeaderStart)
	if d.Settle != nil {
		d.Settle(t.log)
	}
	clientGone := loop(t, frames, admitted, routes(admitted))
	if clientGone {
		t.log.Info("client connection lost: releasing the session terminal")
	}
	t.release(ctx)
}
