package client

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hclog"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/shellquote"
	"github.com/lazaret/lazaret/pkg/timing"
	"github.com/lazaret/lazaret/pkg/trust"
)

// MaxAttempts bounds joins refused because the Domain was stopping.
const MaxAttempts = 100

// StartTimeout bounds how long a CLI waits to start or join a Domain.
const StartTimeout = 3 * time.Minute

// A CLI that finds the Domain lock held and no coordinator serving (one is
// starting, or tearing its generation down) polls again: every
// fastLockWait for the first fastLockPolling of its wait, every
// slowLockWait after (lockWait). A teardown takes some 30 ms, and an agent
// harness that starts a Domain per command starts the next one while the
// previous one's teardown runs: a fixed 20 ms poll made it wait 10 ms
// more, on average, than the teardown did. A poll is a connect and a
// flock, tens of microseconds.
const (
	fastLockWait    = 2 * time.Millisecond
	fastLockPolling = 100 * time.Millisecond
	slowLockWait    = 20 * time.Millisecond
)

// lockWait is the wait before the next poll after waiting for waited.
func lockWait(waited time.Duration) time.Duration {
	if waited < fastLockPolling {
		return fastLockWait
	}
	return slowLockWait
}

// Starter starts or joins one Domain: it connects to the Domain's Host
// Coordinator, and starts one when this CLI wins the Domain lock.
type Starter struct {
	Paths domain.Paths
	// Profile is the Agent Profile's name, CanonicalProfile its validated
	// canonical bytes (handed to a coordinator this CLI starts in a sealed
	// memfd).
	Profile          string
	CanonicalProfile []byte
	// Workspace is the Agent Workspace root; Image the sandbox image.
	Workspace, Image string
	// LocateHC finds the lazaret-hc program (only when one is started).
	LocateHC func() (string, error)
	// FrontExe, when set, is the absolute path of the lazaret front
	// binary: a coordinator this CLI starts runs its wrappers and the
	// connectivity helper's mount-namespace link from it (lazaret-hc
	// --front-exe).
	FrontExe string
	// Environ is the CLI's environment: a coordinator it starts gets the
	// variables it reads from it (see CoordinatorEnv), and ExtraEnv.
	Environ  []string
	ExtraEnv []string
	// LogLevel is the coordinator's --log-level.
	LogLevel string
	// Broker spawns the coordinator.
	Broker *proc.Broker
	// Timing records start-up stages (nil: none).
	Timing *timing.Recorder
	// Keys, when set, are the first attempt's enrollment key and request
	// (PrepareKeys, started early); later attempts generate their own.
	Keys *Keys
	// Notice, when set, shows the developer a line while the start waits
	// (a coordinator that keeps the Domain lock for long: NoticeAfter).
	Notice func(string)

	// Standby, when set, is the coordinator process this CLI started ahead
	// (StartStandby): the first start this CLI makes hands it the
	// start, and Run ends it unused otherwise.
	Standby *StandbyCoordinator

	started bool // this CLI already started a coordinator
}

// Run starts or joins the Domain and runs one Client Session of req: each
// attempt authenticates, registers a fresh Session Anchor (its key binds
// the Session ID) and hands the session to attach, which starts it
// (Session.Start) and runs it to its End. While the Domain is stopping
// (not published, or End.Retry) it starts or joins again, up to
// MaxAttempts. A signal on abort before a session exists ends Run with
// 128+n; Run returns the session's End.
func (s *Starter) Run(req *lv1.RunRequest, abort <-chan os.Signal, attach func(*Session) *End) (*End, error) {
	// A request the control protocol cannot carry is refused before any
	// Domain starts for it.
	if err := CheckRequestSize(req); err != nil {
		return nil, err
	}
	end, err := s.run(req, abort, attach)
	s.Standby.Close() // failed before it connected: unused
	s.Standby = nil
	if err != nil && !errors.Is(err, errdefs.ErrInvalid) && !errors.Is(err, errdefs.ErrRefused) {
		// A coordinator that failed or did not answer may have run out of
		// space for its records: say so when its filesystem is full.
		if note := hostcheck.LowSpaceNote(hostcheck.StatfsNearest, s.Paths.StorageRoot); note != "" {
			err = fmt.Errorf("%w\n%s", err, note)
		}
	}
	return end, err
}

func (s *Starter) run(req *lv1.RunRequest, abort <-chan os.Signal, attach func(*Session) *End) (*End, error) {
	for attempt := 1; ; attempt++ {
		raw, err := s.connectOrSignal(abort)
		var sig signalled
		if errors.As(err, &sig) {
			return &End{Code: 128 + int(sig)}, nil
		}
		if err != nil {
			return nil, err
		}
		s.Timing.Mark("connected to the coordinator")
		// A coordinator answers (this CLI's, or one it joins): a standby
		// left unused would only idle for the session's life.
		s.Standby.Close()
		s.Standby = nil
		keys := s.Keys
		s.Keys = nil
		c, err := AuthenticateWith(raw, s.Paths, s.Profile, keys)
		if errors.Is(err, ErrNotPublished) && attempt < MaxAttempts {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, err
		}
		s.Timing.Mark("authenticated (enrolled, mutual TLS)")
		anchor, err := trust.NewSessionAnchor(nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		req.SessionRegistration = anchor.Registration(c.Identity, c.ClientID).Encode()
		sess := c.Session(req, anchor)
		end := attach(sess)
		sess.Close()
		if end.Retry && attempt < MaxAttempts {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if end.Retry {
			return nil, errdefs.New(errdefs.ErrUnavailable, "the Domain kept stopping while this session tried to join (%d attempts); see %s", attempt, s.Paths.Log())
		}
		return end, nil
	}
}

// signalled is a connect abandoned on a terminal signal.
type signalled syscall.Signal

func (s signalled) Error() string { return syscall.Signal(s).String() }

// connectOrSignal is connect, abandoned on a signal.
func (s *Starter) connectOrSignal(abort <-chan os.Signal) (*net.UnixConn, error) {
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
	case sig := <-abort:
		return nil, signalled(sig.(syscall.Signal))
	}
}

// connect dials the Domain's coordinator; when nothing serves it and this
// CLI takes the Domain lock, it starts one first.
func (s *Starter) connect() (*net.UnixConn, error) {
	deadline := time.Now().Add(StartTimeout)
	var waitingSince time.Time // when the lock was first found held
	noticed := false
	for time.Now().Before(deadline) {
		conn, err := Dial(s.Paths)
		if err == nil {
			return conn, nil
		}
		if errors.Is(err, errdefs.ErrRefused) {
			return nil, err
		}
		lock, err := os.OpenFile(s.Paths.LockFile(), os.O_RDWR|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			// `lazaret rm` removed the Domain Root meanwhile: start afresh.
			if err = domain.EnsurePrivateDir(s.Paths.DomainRoot, os.Getuid()); err == nil {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("open Domain lock: %w", err)
		}
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil && !lockedAtPath(lock, s.Paths.LockFile()) {
			// Locked after `lazaret rm` moved its Domain Root aside: that
			// lock guards nothing any more; take the one at the path.
			lock.Close()
			continue
		}
		if errors.Is(err, unix.EWOULDBLOCK) {
			// A coordinator is starting or stopping: wait for its socket or
			// for the lock.
			lock.Close()
			if waitingSince.IsZero() {
				waitingSince = time.Now()
			}
			if !noticed && time.Since(waitingSince) >= NoticeAfter && s.Notice != nil {
				noticed = true
				s.Notice(fmt.Sprintf("the Domain is busy: its lock is held and no coordinator serves it (one still stopping, or a `lazaret state` or `rm` command at work); waiting, up to %s in all — `%s` shows what its coordinator is doing", StartTimeout, s.logsCommand()))
			}
			time.Sleep(lockWait(time.Since(waitingSince)))
			continue
		}
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("lock Domain: %w", err)
		}
		if s.started {
			// The coordinator this CLI started is gone before serving.
			lock.Close()
			return nil, errdefs.New(errdefs.ErrUnavailable, "the Host Coordinator exited during start-up; see %s (the next lazaret run recovers what it left)", s.Paths.Log())
		}
		s.started = true
		err = s.startCoordinator(lock)
		lock.Close() // the coordinator holds the lock through its own descriptor
		if err != nil {
			return nil, err
		}
	}
	if !waitingSince.IsZero() {
		return nil, errdefs.New(errdefs.ErrUnavailable, "could not start or join the Domain within %s: its lock was held for %s with no coordinator serving it (one stopping or hung, or a maintenance command); `%s` shows its coordinator's last lines", StartTimeout, time.Since(waitingSince).Round(time.Second), s.logsCommand())
	}
	return nil, errdefs.New(errdefs.ErrUnavailable, "could not start or join the Domain within %s; see %s", StartTimeout, s.Paths.Log())
}

// NoticeAfter is how long a start waits for a Domain lock held by a
// coordinator that serves no session before it tells the developer.
const NoticeAfter = 5 * time.Second

// logsCommand is the command that shows the Domain's log.
func (s *Starter) logsCommand() string {
	return "lazaret logs -C " + shellquote.Word(s.Workspace) + " -p " + s.Profile
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

// CoordinatorEnv is what a coordinator gets of the CLI's environment.
func CoordinatorEnv(environ []string) []string {
	env := []string{}
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "USER", "LOGNAME", "PATH", "XDG_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "TMPDIR", timing.EnvFile,
			// Which Git configuration files the developer's Git reads
			// (the coordinator reads them as host Git does).
			"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM":
			env = append(env, kv)
		default:
			if coordinatorPrograms[k] {
				env = append(env, kv)
			}
		}
	}
	return env
}

// coordinatorPrograms are the override variables (LAZARET_<NAME>) of the
// programs a coordinator locates itself: every one of [programs] but
// lazaret-hc, which the CLI locates.
var coordinatorPrograms = func() map[string]bool {
	m := map[string]bool{}
	for _, name := range config.ProgramNames {
		if name != locate.HC {
			m[locate.EnvVar(name)] = true
		}
	}
	return m
}()

// startCoordinator spawns lazaret-hc holding our locked descriptor and waits
// for it to report its socket or its start-up error.
func (s *Starter) startCoordinator(lock *os.File) error {
	hcPath, err := s.LocateHC()
	if err != nil {
		return err
	}
	// Appended: earlier generations stay readable (`lazaret logs
	// --generation N`) until the log is rotated.
	logf, err := hclog.OpenForStart(s.Paths.Log())
	if err != nil {
		return err
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	env := append(CoordinatorEnv(s.Environ), s.ExtraEnv...)
	// The validated profile goes to the coordinator as canonical bytes in a
	// sealed memfd (never a path it would re-read, never mounted).
	profileFile, err := fdpass.SealedMemfd("lazaret-profile", s.CanonicalProfile)
	if err != nil {
		readyW.Close()
		return err
	}
	defer profileFile.Close()
	hcArgs := []string{locate.HC, "--lock-fd=3", "--ready-fd=4", "--profile-fd=5", "--workspace=" + s.Workspace, "--profile=" + s.Profile, "--image=" + s.Image, "--log-level=" + s.LogLevel,
		"--starter-pid=" + strconv.Itoa(os.Getpid())}
	if s.FrontExe != "" {
		hcArgs = append(hcArgs, "--front-exe="+s.FrontExe)
	}
	s.Timing.Mark("starting the coordinator")
	hc := s.takeStandby(hcPath, hcArgs[1:], env, logf, lock, readyW, profileFile)
	if hc == nil {
		hc, err = s.Broker.Start("lazaret-hc", proc.Command{
			Path: hcPath,
			Args: hcArgs,
			Env:  env,
			Dir:  "/",
			// Setsid: terminal signals for the CLI never reach the coordinator.
			Files:  []*os.File{nil, logf, logf, lock, readyW, profileFile},
			Setsid: true,
		})
	}
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start host coordinator: %w", err)
	}
	// A CLI gone before its session registers (interrupted, killed): the
	// coordinator tears down on its own.
	failpoint.Hit("lazaret:coordinator-spawned")
	b, _ := io.ReadAll(io.LimitReader(readyR, 64<<10))
	msg := strings.TrimSpace(string(b))
	if msg == "ok" {
		s.Timing.Mark("coordinator ready")
		return nil
	}
	// The coordinator reports its failure, then removes its runtime
	// directory and exits, which releases the Domain lock. The refusal is
	// returned once it has (bounded): what it suggests — a corrected
	// re-run, `lazaret rm --domain ID` — must find the Domain stopped, not
	// "running" for the milliseconds of that cleanup.
	select {
	case <-hc.Done():
	case <-time.After(failedCoordinatorExitWait):
	}
	if cat, text, ok := strings.Cut(msg, "\x00"); ok {
		return errdefs.Mark(errors.New(text), errdefs.FromCategory(cat))
	}
	return errdefs.New(errdefs.ErrInternal, "host coordinator failed to start; see %s", s.Paths.Log())
}

// takeStandby hands the start to the standby coordinator, if this CLI has
// one running hcPath, and returns it; nil when there is none, or it is
// gone (nothing of the start reached it): the coordinator is then started
// directly.
func (s *Starter) takeStandby(hcPath string, args, env []string, log, lock, ready, profile *os.File) *proc.Child {
	sb := s.Standby
	s.Standby = nil
	if sb == nil {
		return nil
	}
	if sb.path != hcPath {
		sb.Close()
		return nil
	}
	hc, err := sb.activate(args, env, log, lock, ready, profile)
	if err != nil {
		return nil
	}
	return hc
}

// failedCoordinatorExitWait bounds how long a CLI whose coordinator failed
// to start waits for it to exit before reporting the failure.
const failedCoordinatorExitWait = 5 * time.Second
