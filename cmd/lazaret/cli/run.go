package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hclog"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/rawio"
	"github.com/lazaret/lazaret/pkg/timing"
	"github.com/lazaret/lazaret/pkg/trust"
)

// maxAttempts bounds joins refused because the Domain was stopping.
const maxAttempts = 100

// startTimeout bounds how long a CLI waits to start or join a Domain.
const startTimeout = 3 * time.Minute

var runCommand = &cli.Command{
	Name:      "run",
	Usage:     "run a command in this project's sandbox (starting it if needed)",
	ArgsUsage: "[--] [COMMAND [ARG...]]",
	Description: `The Agent Workspace is the top level of the Git repository containing the
current directory (or the directory itself outside a repository); it is
mounted read-write at /workspace and the command runs in the matching
subdirectory. The command's exit status becomes lazaret's (128+n for a
signal); 125 means Lazaret itself failed.

When stdin and stdout are terminals the session is interactive: the command
gets a terminal (with no command: a login shell, bash if the image has it),
every key including Ctrl-C and Ctrl-Z goes to it, and resizes follow. To
suspend lazaret itself, type ~ then Ctrl-Z at the start of a line (or send
it SIGTSTP); ~. disconnects and closes the session.

Examples:
   lazaret run
   lazaret run -- git status
   echo hi | lazaret run -- cat
   lazaret run --profile tiny -- sh -c 'echo $HOSTNAME'
   lazaret run -P 8000 -- python3 -m http.server   then: curl http://127.0.0.1:8000/`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "profile", Aliases: []string{"p"}, Value: "default", Usage: "Agent Profile"},
		&cli.StringFlag{Name: "config", Usage: "host configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml)"},
		&cli.StringFlag{Name: "dir", Aliases: []string{"C"}, Usage: "start directory (default: the current directory)"},
		&cli.BoolFlag{Name: "git-common-dir", Usage: "in a linked Git worktree, mount the repository's common Git directory at its own path (with the Git Sentry applied there); the profile setting git_common_dir does the same"},
		&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "run this session as `root` (maintenance) instead of the profile's user"},
		&cli.BoolFlag{Name: "no-tty", Aliases: []string{"T"}, Usage: "never allocate a terminal, even when stdin and stdout are terminals"},
		&cli.StringFlag{Name: "linger", Usage: "keep the Domain up this long after its last session leaves (e.g. `10m`), so the next lazaret run joins it; overrides the profile's linger; lazaret stop ends it"},
		&cli.StringSliceFlag{Name: "port", Aliases: []string{"P"}, Usage: "forward a host loopback port into the sandbox: `PORT`, HOST:SANDBOX or 127.0.0.1:HOST:SANDBOX (TCP; repeatable); on a join it is added to the running Domain until it stops"},
	},
	Action: runAction,
}

// runStarted is when this CLI process started (package initialisation).
var runStarted = time.Now()

// runTiming records this run's start-up stages when LAZARET_DEBUG=timing
// (nil otherwise: nothing recorded).
var runTiming *timing.Recorder

// startTiming creates the run's timing trace and names it to the
// coordinator this CLI may start; the returned function prints the stages
// to stderr and removes the trace.
func startTiming() (func(), error) {
	rec, path, err := timing.Create(os.TempDir(), time.Now)
	if err != nil {
		return nil, err
	}
	runTiming = rec
	rec.MarkAt("lazaret run started", runStarted)
	os.Setenv(timing.EnvFile, path)
	return func() {
		rec.Mark("lazaret run exits")
		rec.Close()
		runTiming = nil
		marks, err := timing.Read(path)
		os.Remove(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "lazaret: timing: %v\n", err)
			return
		}
		fmt.Fprintln(os.Stderr, "lazaret: start-up stages (LAZARET_DEBUG=timing; teardown runs after this CLI exits):")
		timing.Write(os.Stderr, marks)
	}, nil
}

func runAction(c *cli.Context) error {
	if err := modeltrace.Start("cli", os.Getenv); err != nil {
		return err
	}
	if timing.Requested(os.Getenv) {
		done, err := startTiming()
		if err != nil {
			return err
		}
		defer done()
	}
	argv := c.Args().Slice()
	tty := !c.Bool("no-tty") && useTerminal()
	// A terminal signal before the session runs ends this CLI with 128+n
	// (a coordinator it started notices the lost client and stops); once the
	// session runs, signals are forwarded to the command.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	// The host checks come first (root, kernel, devices, subordinate ids),
	// before any configuration is read; the exact build's qualification is
	// checked below, once the trees the sandbox will write are known (the
	// records are read once).
	host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
	if err := host.AllButQualification(); err != nil {
		return err
	}
	runTiming.Mark("host checked")
	prof, err := lookupProfileIn(c.String("config"), c.String("profile"))
	if err != nil {
		return err
	}
	runTiming.Mark("configuration read")
	if len(argv) == 0 {
		switch {
		case len(prof.Config.Command) > 0:
			argv = prof.Config.Command
		case !tty:
			return errdefs.New(errdefs.ErrInvalid, "no command given and stdin/stdout are not a terminal: usage `lazaret run [--profile P] -- COMMAND [ARG...]` (with no command on a terminal, lazaret starts an interactive shell)")
		default:
			argv = defaultShell
		}
	}
	if c.Bool("git-common-dir") {
		prof.Config.GitCommonDir = true
	}
	// A recipe image is built on first use (and when its base changed).
	if prof.Config.Recipe != nil {
		if _, err := ensureRecipeImage(c.Context, prof, os.Stderr, false); err != nil {
			return err
		}
	}
	if u := c.String("user"); u != "" && u != config.RootUser && u != prof.Config.SessionUser().Name {
		return errdefs.New(errdefs.ErrInvalid, "--user %q: a session runs as the profile's user (%s) or as root (--user root)", u, prof.Config.SessionUser().Name)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// One spawn/reap broker for this CLI: secret commands and the
	// coordinator it may start.
	broker, err := proc.NewBroker(slog.New(slog.DiscardHandler), exe)
	if err != nil {
		return err
	}
	// Credentials are resolved on the host before any Domain starts: a
	// missing one stops here.
	creds, err := resolveCredentials(broker, prof.Config)
	if err != nil {
		return err
	}
	var ports []string
	for _, a := range c.StringSlice("port") {
		p, err := config.ParsePort(a)
		if err != nil {
			return errdefs.Mark(err, errdefs.ErrInvalid)
		}
		ports = append(ports, p.String())
	}
	linger := prof.Config.Linger
	if c.IsSet("linger") {
		l, msg := config.ParseLinger(c.String("linger"))
		if msg != "" {
			return errdefs.New(errdefs.ErrInvalid, "--linger %s", msg)
		}
		linger = l
	}
	image, err := prof.imageRef()
	if err != nil {
		return err
	}
	dir := c.String("dir")
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return err
		}
	}
	ws, err := domain.ResolveWorkspace(dir, os.Getenv("HOME"))
	if err != nil {
		return err
	}
	// Configuration confinement (spec §1.1): the configuration file may not
	// be inside, or an ancestor of, any path the sandbox mounts.
	if prof.ConfigPath != "" {
		if _, err := config.Confine(prof.ConfigPath, prof.Config.Mounts(ws.Root)); err != nil {
			return err
		}
	}
	// No host qualification record inside a tree the sandbox can write.
	host.SandboxWritable = writableSources(prof.Config.Mounts(ws.Root))
	if err := host.Kernel(); err != nil {
		return err
	}
	uid := os.Getuid()
	roots, err := domain.DefaultRoots(os.Getenv, uid)
	if err != nil {
		return err
	}
	paths, err := domain.PathsFor(roots, domain.DeriveID(prof.Name, ws.Root))
	if err != nil {
		return err
	}
	for _, d := range []string{roots.Storage, paths.DomainRoot} {
		if err := domain.EnsurePrivateDir(d, uid); err != nil {
			return err
		}
	}
	req := &lv1.RunRequest{
		ConfigurationFingerprint: prof.Config.Fingerprint(),
		CanonicalProfile:         prof.Config.Canonical(),
		ProtocolVersion:          lv1.ProtocolVersion_PROTOCOL_VERSION_1,
		DomainId:                 string(paths.ID),
		Profile:                  prof.Name,
		Argv:                     argv,
		WorkspaceSubdir:          ws.Subdir,
		User:                     c.String("user"),
		Env:                      map[string]string{},
		Credentials:              creds,
		ForwardPorts:             ports,
		LingerMs:                 uint64(linger.Milliseconds()),
		Stdin:                    true,
	}
	if tty {
		ws, err := windowSize(0)
		if err != nil {
			return err
		}
		req.Tty, req.WindowSize = true, ws
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k == "TERM" || k == "LANG" || k == "COLORTERM" || k == "TZ" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") {
			req.Env[k] = v
		}
	}
	s := &starter{paths: paths, prof: prof, ws: ws.Root, image: image, broker: broker}
	runTiming.Mark("request prepared (credentials, workspace, kernel)")
	for attempt := 1; ; attempt++ {
		raw, err := s.connectOrSignal(sigs)
		if err != nil {
			return err
		}
		runTiming.Mark("connected to the coordinator")
		auth, err := authenticate(raw, paths, prof.Name)
		if errors.Is(err, errNotPublished) && attempt < maxAttempts {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
		// A fresh Session Anchor per attempt: its key binds the Session ID.
		anchor, err := trust.NewSessionAnchor(nil)
		if err != nil {
			auth.conn.Close()
			return err
		}
		req.SessionRegistration = anchor.Registration(auth.identity, auth.clientID).Encode()
		conn := auth.conn
		run := session
		if req.Tty {
			run = func(conn net.Conn, req *lv1.RunRequest, sigs <-chan os.Signal) (int, bool, error) {
				return terminalSession(conn, req, sigs, anchor)
			}
		}
		code, retry, err := run(conn, req, sigs)
		if retry && attempt < maxAttempts {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if retry {
			return errdefs.New(errdefs.ErrUnavailable, "the Domain kept stopping while this session tried to join (%d attempts); see %s", attempt, paths.Log())
		}
		if err != nil {
			return err
		}
		return exitError{code}
	}
}

// starter connects to the Domain's Host Coordinator, starting it when this
// CLI wins the Domain lock.
type starter struct {
	started bool // this CLI already started a coordinator
	paths   domain.Paths
	prof    profile
	ws      string
	image   string
	broker  *proc.Broker
}

// connectOrSignal is connect, abandoned with 128+n on a terminal signal.
func (s *starter) connectOrSignal(sigs <-chan os.Signal) (*net.UnixConn, error) {
	type result struct {
		conn *net.UnixConn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := s.connect()
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case sig := <-sigs:
		return nil, exitError{128 + int(sig.(syscall.Signal))}
	}
}

func (s *starter) connect() (*net.UnixConn, error) {
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		conn, err := dialControl(s.paths)
		if err == nil {
			return conn, nil
		}
		if errors.Is(err, errdefs.ErrRefused) {
			return nil, err
		}
		lock, err := os.OpenFile(s.paths.LockFile(), os.O_RDWR|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			// `lazaret rm` removed the Domain Root meanwhile: start afresh.
			if err = domain.EnsurePrivateDir(s.paths.DomainRoot, os.Getuid()); err == nil {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("open Domain lock: %w", err)
		}
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil && !lockedAtPath(lock, s.paths.LockFile()) {
			// Locked after `lazaret rm` moved its Domain Root aside: that
			// lock guards nothing any more; take the one at the path.
			lock.Close()
			continue
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			// A coordinator is starting or stopping: wait for its socket or
			// for the lock.
			lock.Close()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("lock Domain: %w", err)
		}
		if s.started {
			// The coordinator this CLI started is gone before serving.
			lock.Close()
			return nil, errdefs.New(errdefs.ErrUnavailable, "the Host Coordinator exited during start-up; see %s (the next lazaret run recovers what it left)", s.paths.Log())
		}
		s.started = true
		err = s.startCoordinator(lock)
		lock.Close() // the coordinator holds the lock through its own descriptor
		if err != nil {
			return nil, err
		}
	}
	return nil, errdefs.New(errdefs.ErrUnavailable, "could not start or join the Domain within %s; see %s", startTimeout, s.paths.Log())
}

// lockedAtPath reports whether the locked file f is still the file at
// path: a lock file moved or removed since it was opened (`lazaret rm`)
// excludes nobody.
func lockedAtPath(f *os.File, path string) bool {
	var held, there unix.Stat_t
	if unix.Fstat(int(f.Fd()), &held) != nil || unix.Stat(path, &there) != nil {
		return false
	}
	return held.Dev == there.Dev && held.Ino == there.Ino
}

// startCoordinator spawns lazaret-hc holding our locked descriptor and waits
// for it to report its socket or its start-up error.
func (s *starter) startCoordinator(lock *os.File) error {
	hcPath, err := locate.Find(locate.HC, programGetenv(s.prof.Programs, os.Getenv))
	if err != nil {
		return err
	}
	// Appended: earlier generations stay readable (`lazaret logs
	// --generation N`) until the log is rotated.
	logf, err := hclog.OpenForStart(s.paths.Log())
	if err != nil {
		return err
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	broker := s.broker
	level := "info"
	if timing.DebugLogging(os.Getenv) {
		level = "debug"
	}
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "USER", "LOGNAME", "PATH", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "LAZARET_RUNSC", "LAZARET_RS", "LAZARET_ESCALATE", "TMPDIR", timing.EnvFile,
			// Which Git configuration files the developer's Git reads
			// (the coordinator reads them as host Git does).
			"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM":
			env = append(env, kv)
		}
	}
	env = append(env, programEnv(s.prof.Programs, os.Getenv)...)
	if modeltrace.On() {
		// This session is the one the new generation starts for.
		env = append(append(env, modeltrace.Environ()...), modeltrace.EnvSession+"="+modeltrace.SessionKey(os.Getpid()))
	}
	// The validated profile goes to the coordinator as canonical bytes in a
	// sealed memfd (never a path it would re-read, never mounted).
	profileFile, err := fdpass.SealedMemfd("lazaret-profile", s.prof.Config.Canonical())
	if err != nil {
		readyW.Close()
		return err
	}
	defer profileFile.Close()
	runTiming.Mark("starting the coordinator")
	_, err = broker.Start("lazaret-hc", proc.Command{
		Path: hcPath,
		Args: []string{locate.HC, "--lock-fd=3", "--ready-fd=4", "--profile-fd=5", "--workspace=" + s.ws, "--profile=" + s.prof.Name, "--image=" + s.image, "--log-level=" + level},
		Env:  env,
		Dir:  "/",
		// Setsid: terminal signals for the CLI never reach the coordinator.
		Files:  []*os.File{nil, logf, logf, lock, readyW, profileFile},
		Setsid: true,
	})
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start host coordinator: %w", err)
	}
	b, _ := io.ReadAll(io.LimitReader(readyR, 64<<10))
	msg := strings.TrimSpace(string(b))
	if msg == "ok" {
		runTiming.Mark("coordinator ready")
		return nil
	}
	if cat, text, ok := strings.Cut(msg, "\x00"); ok {
		return errdefs.Mark(errors.New(text), errdefs.FromCategory(cat))
	}
	return errdefs.New(errdefs.ErrInternal, "host coordinator failed to start; see %s", s.paths.Log())
}

// session runs one Client Session on conn. retry reports a Domain that was
// stopping: the caller starts or joins again.
func session(conn net.Conn, req *lv1.RunRequest, sigs <-chan os.Signal) (code int, retry bool, err error) {
	defer conn.Close()
	fc := control.NewConn(conn)
	if err := fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Run{Run: req}}); err != nil {
		return 0, true, nil // the coordinator closed between dial and request
	}
	// Job control of a non-interactive session: SIGTSTP sent to this CLI
	// (Ctrl-Z in the outer shell, or another process) suspends the
	// session's guest process group (Suspend) and then stops this CLI, so
	// the outer shell gets its prompt back; when the CLI is continued (fg,
	// bg, SIGCONT) it resumes the group (Continue).
	jobSigs := make(chan os.Signal, 4)
	signal.Notify(jobSigs, syscall.SIGTSTP, syscall.SIGCONT)
	defer signal.Stop(jobSigs)
	self, _ := pidfs.Open(os.Getpid())
	if self != nil {
		defer self.Close()
	}
	frames, readErr := readFrames(fc, nil, nil)
	stderrTTY := isTerminal(2)
	accepted, gotFrame, suspended := false, false, false
	for {
		select {
		case sig := <-sigs:
			if !accepted {
				return 128 + int(sig.(syscall.Signal)), false, nil
			}
			switch sig {
			case syscall.SIGINT: // to the guest group, as a host terminal's ^C
				fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Interrupt{Interrupt: &lv1.Interrupt{}}})
			case syscall.SIGQUIT:
				fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Quit{Quit: &lv1.Quit{}}})
			default: // SIGTERM, SIGHUP: to the exact guest process
				fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Signal{Signal: &lv1.SignalRequest{Signal: int32(sig.(syscall.Signal))}}})
			}
		case sig := <-jobSigs:
			switch {
			case sig == syscall.SIGTSTP:
				if accepted && fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Suspend{Suspend: &lv1.Suspend{}}}) == nil {
					suspended = true
				}
				if self != nil {
					self.Signal(unix.SIGSTOP) // through our own pidfd, never by number
				}
			case sig == syscall.SIGCONT && suspended:
				suspended = false
				fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Continue{Continue: &lv1.Continue{}}})
			}
		case f, ok := <-frames:
			if !ok {
				err := <-readErr
				if !accepted && !gotFrame {
					// Closed before answering: the coordinator was stopping.
					return 0, true, nil
				}
				return 0, false, errdefs.Mark(fmt.Errorf("lost the connection to the Host Coordinator: %v", err), errdefs.ErrUnavailable)
			}
			gotFrame = true
			switch {
			case f.GetProgress() != nil:
				// Progress is for a watching developer; warnings (e.g. DNS
				// not answering) always reach stderr.
				if m := f.GetProgress().GetMessage(); stderrTTY || strings.HasPrefix(m, "warning: ") {
					fmt.Fprintf(os.Stderr, "lazaret: %s\n", m)
				}
			case f.GetAccepted() != nil:
				runTiming.Mark("session accepted")
				accepted = true
				go relayStdin(fc)
			case f.GetExit() != nil:
				runTiming.Mark("exit status received")
				if f.GetExit().GetStopped() {
					fmt.Fprintln(os.Stderr, stoppedMessage)
					return ExitStopped, false, nil
				}
				return int(f.GetExit().GetCode()), false, nil
			case f.GetError() != nil:
				e := f.GetError()
				if e.Retry && !accepted {
					return 0, true, nil
				}
				return 0, false, errdefs.Mark(errors.New(e.Message), errdefs.FromCategory(e.Category))
			}
		}
	}
}

func relayStdin(fc *control.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Stdin{Stdin: &lv1.StdinData{Data: append([]byte(nil), buf[:n]...)}}}) != nil {
				return
			}
		}
		if err != nil {
			fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_StdinClose{StdinClose: &lv1.StdinClose{}}})
			return
		}
	}
}

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// readFrames reads server frames on their own goroutine: the channel closes
// after the first read error, which readErr then holds. Output frames never
// reach the channel: the reading goroutine writes their bytes itself, in
// order, straight from the read buffer (ParseOutput: no copy, no decode, no
// hand-off per frame), so every frame after them on the channel (Exit,
// Error) comes after the last output byte was written. With a non-nil
// accepted, the reader waits on it after handing over the Accepted frame,
// so no output is written before the caller has set up its terminal.
// inline, when not nil, is offered every other frame first, on the reading
// goroutine, so what it writes keeps its place among the output bytes; it
// reports whether it handled the frame.
func readFrames(fc *control.Conn, accepted <-chan struct{}, inline func(*lv1.ServerFrame) bool) (<-chan *lv1.ServerFrame, <-chan error) {
	frames := make(chan *lv1.ServerFrame, 16)
	readErr := make(chan error, 1)
	go func() {
		for {
			b, err := fc.ReadRaw(control.MaxFrame)
			if err == nil {
				if stream, data, ok := control.ParseOutput(b); ok {
					writeOutput(stream, data)
					continue
				}
				var f lv1.ServerFrame
				if err = proto.Unmarshal(b, &f); err != nil {
					err = errdefs.Mark(fmt.Errorf("decode frame: %w", err), errdefs.ErrCorrupt)
				} else if o := f.GetOutput(); o != nil {
					writeOutput(o.Stream, o.Data)
					continue
				} else if inline != nil && inline(&f) {
					continue
				} else {
					frames <- &f
					if accepted != nil && f.GetAccepted() != nil {
						<-accepted
					}
					continue
				}
			}
			readErr <- err
			close(frames)
			return
		}
	}()
	return frames, readErr
}

// writeOutput writes session output: stderr bytes to stderr, stdout and
// terminal bytes to stdout. Terminal bytes (an interactive session, whose
// stdout is the user's terminal) go through terminalOut.
func writeOutput(stream lv1.Stream, data []byte) {
	switch stream {
	case lv1.Stream_STREAM_TERMINAL:
		terminalOut.Write(data)
	case lv1.Stream_STREAM_STDERR:
		os.Stderr.Write(data)
	default:
		os.Stdout.Write(data)
	}
}

// terminalOut writes to the user's terminal with the runtime's system-call
// bookkeeping left out (rawio.TerminalWriter): on the 64 MiB benchmark the
// relay ran ~8–12 % faster than through os.Stdout.
var terminalOut = rawio.NewTerminalWriter(unix.Stdout)

// writableSources are the host trees a sandbox with mounts can write: no
// host qualification record is trusted inside them.
func writableSources(mounts []config.Mount) []string {
	var out []string
	for _, m := range mounts {
		if !m.ReadOnly {
			out = append(out, m.Source)
		}
	}
	return out
}
