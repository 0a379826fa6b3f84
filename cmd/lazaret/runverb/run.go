package runverb

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/client"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/rawio"
	"github.com/lazaret/lazaret/pkg/shellquote"
	"github.com/lazaret/lazaret/pkg/termtext"
	"github.com/lazaret/lazaret/pkg/timing"
)

// Command is the `lazaret run` verb.
var Command = &cli.Command{
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
// to stderr and removes the trace (only removes it when the run is handed
// to the full CLI, which records its own).
func startTiming() (func(handedOver bool), error) {
	rec, path, err := timing.Create(os.TempDir(), time.Now)
	if err != nil {
		return nil, err
	}
	runTiming = rec
	rec.MarkAt("lazaret run started", runStarted)
	os.Setenv(timing.EnvFile, path)
	return func(handedOver bool) {
		rec.Mark("lazaret run exits")
		rec.Close()
		runTiming = nil
		marks, err := timing.Read(path)
		os.Remove(path)
		if handedOver {
			os.Unsetenv(timing.EnvFile)
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "lazaret: timing: %v\n", err)
			return
		}
		fmt.Fprintln(os.Stderr, "lazaret: start-up stages (LAZARET_DEBUG=timing; teardown runs after this CLI exits):")
		timing.Write(os.Stderr, marks)
	}, nil
}

func runAction(c *cli.Context) (err error) {
	if err := modeltrace.Start("cli", os.Getenv); err != nil {
		return err
	}
	if timing.Requested(os.Getenv) {
		done, terr := startTiming()
		if terr != nil {
			return terr
		}
		defer func() { done(errors.Is(err, ErrFullCLI)) }()
	}
	// One spawn/reap broker for this CLI: secret commands and the
	// coordinator it may start.
	broker, err := proc.NewSelfBroker(nil)
	if err != nil {
		return err
	}
	// The profile and the workspace are read ahead, to start the Domain's
	// coordinator process now when the Domain is not running (lookAhead);
	// their errors are reported below, after the host checks.
	ahead := lookAhead(c, broker)
	defer func() { ahead.standby.Close() }() // unless a start took it (client.Starter)
	// The enrollment key and request are generated while the host checks,
	// the configuration and the workspace are read.
	keys := client.PrepareKeys()
	argv := c.Args().Slice()
	tty := !c.Bool("no-tty") && useTerminal()
	// A terminal signal before the session runs ends this CLI with 128+n
	// (a coordinator it started notices the lost client and stops); once the
	// session runs, signals are forwarded to the command.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	// The host checks come first (root, kernel, devices, subordinate ids):
	// a host they refuse is reported before any error of the configuration
	// or the workspace read ahead; the exact build's qualification is
	// checked below, once the trees the sandbox will write are known (the
	// records are read once).
	host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
	if err := host.AllButQualification(); err != nil {
		return err
	}
	runTiming.Mark("host checked")
	prof, err := ahead.prof, ahead.profErr
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
	// A recipe image is built on first use (and when its base changed), by
	// the full CLI: the front hands the whole command over to it.
	if prof.Config.Recipe != nil {
		if EnsureRecipeImage == nil {
			return ErrFullCLI
		}
		if err := EnsureRecipeImage(c.Context, prof, TerminalSafe(os.Stderr)); err != nil {
			return err
		}
	}
	if u := c.String("user"); u != "" && u != config.RootUser && u != prof.Config.SessionUser().Name {
		return errdefs.New(errdefs.ErrInvalid, "--user %q: a session runs as the profile's user (%s) or as root (--user root)", u, prof.Config.SessionUser().Name)
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
	image, err := prof.ImageRef()
	if err != nil {
		return err
	}
	ws, err := ahead.ws, ahead.wsErr
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
	// A coordinator that cannot write its records stops: a (nearly) full
	// filesystem is refused here, with what to free, before any starts.
	if err := hostcheck.StartSpace(hostcheck.StatfsNearest, roots.Storage, roots.Runtime); err != nil {
		return err
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
	level := "info"
	if timing.DebugLogging(os.Getenv) {
		level = "debug"
	}
	s := &client.Starter{
		Paths: paths, Profile: prof.Name, CanonicalProfile: prof.Config.Canonical(),
		Workspace: ws.Root, Image: image,
		LocateHC: func() (string, error) { return locate.Find(locate.HC, ProgramGetenv(prof.Programs, os.Getenv)) },
		Environ:  os.Environ(), ExtraEnv: coordinatorExtraEnv(prof),
		LogLevel: level, Broker: broker, Timing: runTiming, Keys: keys, FrontExe: frontExe,
		Notice:  func(m string) { fmt.Fprintln(os.Stderr, "lazaret: "+m) },
		Standby: ahead.take(paths.ID),
	}
	runTiming.Mark("request prepared (credentials, workspace, kernel)")
	attach := func(sess *client.Session) *client.End { return session(sess, sigs) }
	if req.Tty {
		attach = func(sess *client.Session) *client.End { return terminalSession(sess, sigs) }
	}
	end, err := s.Run(req, sigs, attach)
	if err != nil {
		return err
	}
	if end.Lost {
		return lostCoordinator(end.Err, prof.Name, c.String("dir"), ws.Root, roots.Storage)
	}
	if end.Err != nil {
		return end.Err
	}
	return ExitError{Code: end.Code}
}

// lostCoordinator is the error of a session whose coordinator went away
// (it crashed or was killed): what became of the session and the Domain,
// and where to look. Nothing of the Domain keeps running (its processes
// end with the coordinator); the next `lazaret run` recovers its state.
func lostCoordinator(err error, profile, dirFlag, workspace, storageRoot string) error {
	logs := "lazaret logs -p " + profile
	if dirFlag != "" {
		logs += " -C " + shellquote.Word(workspace)
	}
	err = fmt.Errorf("%w\nthe Domain's Host Coordinator ended during the session (it crashed or was killed), so the session is over and the sandbox was torn down with it; the next `lazaret run` here recovers the Domain, and `%s` shows its last lines", err, logs)
	if note := hostcheck.LowSpaceNote(hostcheck.StatfsNearest, storageRoot); note != "" {
		err = fmt.Errorf("%w\n%s", err, note)
	}
	return err
}

// session runs the CLI's side of a non-interactive Client Session: it
// forwards signals, job control and stdin, and shows progress; the End it
// returns has the command's exit status.
func session(sess *client.Session, sigs <-chan os.Signal) *client.End {
	sess.Start(client.SessionOptions{Output: writeOutput})
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
	stderrTTY := IsTerminal(2)
	suspended := false
	for {
		select {
		case sig := <-sigs:
			if !sess.Forward(sig.(syscall.Signal)) {
				return &client.End{Code: 128 + int(sig.(syscall.Signal))}
			}
		case sig := <-jobSigs:
			switch {
			case sig == syscall.SIGTSTP:
				if sess.Accepted() && sess.Suspend() == nil {
					suspended = true
				}
				if self != nil {
					self.Signal(unix.SIGSTOP) // through our own pidfd, never by number
				}
			case sig == syscall.SIGCONT && suspended:
				suspended = false
				sess.Continue()
			}
		case ev := <-sess.Events():
			if e := ev.End; e != nil {
				if !e.Retry && e.Err == nil {
					runTiming.Mark("exit status received")
					if e.Stopped {
						fmt.Fprintln(os.Stderr, StoppedMessage)
						return &client.End{Code: ExitStopped}
					}
				}
				return e
			}
			switch f := ev.Frame; {
			case f.GetProgress() != nil:
				// Progress is for a watching developer; warnings (e.g. DNS
				// not answering) always reach stderr.
				if m := f.GetProgress().GetMessage(); stderrTTY || strings.HasPrefix(m, control.ProgressWarning) {
					fmt.Fprintf(os.Stderr, "lazaret: %s\n", termtext.Line(m))
				}
			case f.GetAccepted() != nil:
				runTiming.Mark("session accepted")
				go relayStdin(sess)
				// From here on this CLI only relays: give back what
				// starting the session needed.
				idlemem.SettleSoon(nil)
			}
		}
	}
}

func relayStdin(sess *client.Session) {
	buf := make([]byte, 32<<10)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if sess.Stdin(buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			sess.CloseStdin()
			return
		}
	}
}

// IsTerminal reports whether fd is a terminal.
func IsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// TerminalSafe is f, through a termtext.Writer when f is a terminal: what
// Lazaret itself writes there (not a session's output) may carry text
// the sandbox chose, which must not act on the developer's terminal.
func TerminalSafe(f *os.File) io.Writer {
	if IsTerminal(int(f.Fd())) {
		return termtext.NewWriter(f)
	}
	return f
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
