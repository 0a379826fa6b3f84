package hc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/gitconfigguard"
	"github.com/lazaret/lazaret/pkg/guestbin"
	"github.com/lazaret/lazaret/pkg/hc/escalation"
	"github.com/lazaret/lazaret/pkg/hc/gitrouting"
	"github.com/lazaret/lazaret/pkg/hc/modelsteps"
	"github.com/lazaret/lazaret/pkg/hc/network"
	"github.com/lazaret/lazaret/pkg/hc/preparedlower"
	"github.com/lazaret/lazaret/pkg/hc/publication"
	"github.com/lazaret/lazaret/pkg/hc/sandbox"
	"github.com/lazaret/lazaret/pkg/hc/sessions"
	"github.com/lazaret/lazaret/pkg/hc/sessionterm"
	"github.com/lazaret/lazaret/pkg/hc/supervisor"
	"github.com/lazaret/lazaret/pkg/hclog"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/timing"
	"github.com/lazaret/lazaret/pkg/trust"
)

type state int

const (
	stateStarting state = iota
	stateRunning
	stateFailed
	stateStopping
)

// Timeouts.
var (
	helloTimeout = 30 * time.Second
	drainTimeout = sessionterm.DrainTimeout
	closeGrace   = sessionterm.CloseGrace
	// startFailureGrace bounds how long a generation that failed before
	// any session arrived keeps its control socket for the CLI that
	// started it (teardown's first step).
	startFailureGrace = 2 * time.Second
)

// errStopping refuses a session because the Domain is stopping normally;
// the CLI retries (and starts a new generation once this one is gone).
var errStopping = errdefs.New(errdefs.ErrUnavailable, "the Domain is stopping")

type coordinator struct {
	timing *timing.Recorder // nil unless LAZARET_DEBUG=timing
	log    *slog.Logger
	broker *proc.Broker
	paths  domain.Paths
	// cfg is the generation's configuration (generation.go): the Domain
	// as the CLI named it, its profile, the coordinator's ID and the guest
	// environment.
	cfg generationConfig

	lockFile   *os.File
	generation uint64
	store      *store.Store   // the Domain Store (only this process opens it)
	self       pidfs.Identity // this coordinator's own pidfs identity
	// recovery is bootstrap recovery's outcome: the records it retained
	// (recovery.go).
	recovery recovery
	anchor   *trust.Anchor
	esc      *escalation.Service // host escalation (package escalation)
	// rs drives the Runtime Supervisor: its acquisition, begun during
	// init, its channel and its lifetime (package supervisor).
	rs      *supervisor.Driver
	pub     *publication.Service // the publication role (package publication)
	net     *network.Service     // the Network Sidecar role (package network)
	routing *gitrouting.Service  // the Git-routing role (package gitrouting)
	// hostGit waits for the host's Git configuration, read since before
	// the store opened (readHostGitConfig); sandboxStart applies it.
	hostGit func() (gitconfigguard.Result, error)
	// hostGitStart is what StartSandbox was built from; watchHostGit
	// starts from it once the Domain is published.
	hostGitStart gitconfigguard.Result
	// exchangeDone is closed when superviseMessages has read RS's last
	// message: RS's own report of its failure is read before its exit is
	// judged (failOnUnexpectedExit).
	exchangeDone chan struct{}
	// helperAnnounced is closed once RS was told the connectivity helper
	// is ready (announceHelper), or that will not happen; nil until
	// StartSandbox is sent.
	helperAnnounced chan struct{}
	// stickyScan is the start scan of the sticky ignored paths, begun
	// before the store opens (gitrouting.BeginStickyScan).
	stickyScan *gitrouting.StickyScan
	// lower drives the prepared lower and State Anchors (package
	// preparedlower); set once the Domain Store is open.
	lower *preparedlower.Service
	// sb drives the sandbox participant: RS's slot, the attached runsc
	// and runsc's children (package sandbox); set once the store is open.
	sb *sandbox.Service

	mu      sync.Mutex
	st      state
	failErr error
	ready   chan struct{} // closed when running or failed
	// sandboxUp is closed once RS reported the sandbox ready, before the
	// publication: a starting session's first-session start goes to the
	// init, held, from then on (holdFirst).
	sandboxUp     chan struct{}
	sandboxUpOnce sync.Once
	// first is the generation's first-session socket (firstsession.go),
	// nil if it could not be created.
	first *firstSlot
	// startFailed: the generation failed before its publication.
	// failureHeard is closed once a session request was refused with
	// that failure (the starting CLI connects after the failure when the
	// failure comes first).
	startFailed  bool
	failureHeard chan struct{}
	heardOnce    sync.Once
	progress     []string
	changed      chan struct{} // closed and replaced on every progress line
	// guestBinaries reports the copy of lazaret-init and
	// lazaret-escalate into the control mount (init), which sandboxStart
	// awaits.
	guestBinaries <-chan error
	// reusableLower waits for the prepared artifact the Storage Catalog
	// lets RS reuse as it is (preparedlower.Service.LeaseAhead), read
	// beside RS's start.
	reusableLower func() string
	// sessions is the Client Session registry (package sessions),
	// guarded by mu.
	sessions  *sessions.Registry[*session]
	teardownC chan struct{}
	// mt is what this coordinator recorded in the model trace (package
	// modelsteps), guarded by mu; untouched unless LAZARET_MODEL_TRACE
	// is set.
	mt modelsteps.Steps
}

// Main runs the Host Coordinator and returns its exit status.
func Main(args []string) int {
	fs := flag.NewFlagSet("lazaret-hc", flag.ContinueOnError)
	lockFD := fs.Int("lock-fd", -1, "inherited descriptor holding the Domain flock")
	readyFD := fs.Int("ready-fd", -1, "pipe on which to report start-up to the CLI")
	ws := fs.String("workspace", "", "canonical Agent Workspace")
	prof := fs.String("profile", "", "Agent Profile")
	image := fs.String("image", "", "image reference of the profile")
	profileFD := fs.Int("profile-fd", -1, "inherited write-sealed memfd with the validated profile's canonical bytes")
	level := fs.String("log-level", "info", "debug|info|warn|error")
	idle := fs.Duration("idle-timeout", 10*time.Second, "tear down if no session arrives this long after start")
	frontExe := fs.String("front-exe", "", "the lazaret front binary, which runs this coordinator's wrappers (default: this binary)")
	starterPID := fs.Int("starter-pid", 0, "pid of the lazaret run that starts this coordinator (its parent)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The `lazaret run` that started this coordinator: its pidfd, taken
	// now, while it waits for this start, or that it is gone already
	// (starterWatch).
	starter, starterGone := openStarter(*starterPID)
	rec := timing.FromEnv("hc", os.Getenv, time.Now)
	rec.Mark("coordinator started")
	if err := modeltrace.Start("hc", os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "lazaret-hc:", err)
	}
	var lvl slog.Level
	lvl.UnmarshalText([]byte(*level))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("role", "hc", "pid", os.Getpid())
	// The marker that starts this process's part of the Domain log
	// (`lazaret logs` groups the log by it).
	log.Info(hclog.StartMarker, "workspace", *ws, "profile", *prof)
	if *lockFD < 3 || *readyFD < 3 || *profileFD < 3 {
		fmt.Fprintln(os.Stderr, "lazaret-hc is started by lazaret, not by hand (missing --lock-fd/--ready-fd/--profile-fd)")
		return 2
	}
	ready := os.NewFile(uintptr(*readyFD), "ready")
	unix.CloseOnExec(*readyFD)
	unix.CloseOnExec(*lockFD)
	c := &coordinator{timing: rec, log: log, cfg: generationConfig{workspace: *ws, profileName: *prof, image: *image, frontExe: *frontExe},
		lockFile: os.NewFile(uintptr(*lockFD), "lifecycle.lock"),
		ready:    make(chan struct{}), sandboxUp: make(chan struct{}), changed: make(chan struct{}), exchangeDone: make(chan struct{}),
		teardownC: make(chan struct{}), failureHeard: make(chan struct{})}
	c.sessions = sessions.New[*session](sessions.Config{Log: log, LingerExpired: c.lingerExpired})
	if err := c.init(*profileFD, *level); err != nil {
		if c.guestBinaries != nil {
			<-c.guestBinaries // its files are in the runtime directory removed below
		}
		c.rs.Abort()
		log.Error("start failed", "err", err)
		fmt.Fprintf(ready, "%s\x00%s\n", errdefs.Category(err), err)
		ready.Close()
		c.cleanupRuntime()
		return 1
	}
	c.timing.Mark("control socket bound")
	fmt.Fprintln(ready, "ok")
	ready.Close()
	failpoint.Hit("lazaret-hc:started")
	go c.acceptLoop()
	go c.startGeneration()
	go c.idleWatch(*idle)
	if starter != nil || starterGone {
		go c.starterWatch(starter, *starterPID, *idle)
	}
	<-c.teardownC
	c.teardown()
	return 0
}

// randomID mints a runtime-unique ID (coordinator, sandbox, session).
func randomID() string {
	id, err := trust.NewID(nil)
	if err != nil {
		panic(err) // the system random source failed
	}
	return id
}

// init validates the Domain, claims its runtime directory and opens the
// control socket. Nothing of the generation exists yet. The validated
// profile arrives in profileFD; RS logs at logLevel.
func (c *coordinator) init(profileFD int, logLevel string) error {
	// The inherited descriptor must hold the Domain lock: re-locking our own
	// open file description succeeds only if it is ours (or free).
	if err := unix.Flock(int(c.lockFile.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errdefs.New(errdefs.ErrRefused, "lazaret-hc does not hold the Domain lock: %v", err)
	}
	if !domain.ValidProfileName(c.cfg.profileName) || !filepath.IsAbs(c.cfg.workspace) || c.cfg.image == "" {
		return errdefs.New(errdefs.ErrInvalid, "bad coordinator arguments (profile %q workspace %q image %q)", c.cfg.profileName, c.cfg.workspace, c.cfg.image)
	}
	// The profile arrives as canonical bytes in a sealed memfd: trusted
	// configuration, validated by the CLI, re-validated here.
	raw, err := fdpass.ReadSealedMemfd(profileFD, 1<<20)
	if err != nil {
		return err
	}
	if c.cfg.profile, err = config.FromCanonical(raw); err != nil {
		return errdefs.Mark(fmt.Errorf("profile from the CLI: %w", err), errdefs.ErrCorrupt)
	}
	if c.cfg.profile.Name != c.cfg.profileName {
		return errdefs.New(errdefs.ErrRefused, "profile bytes name %q, not %q", c.cfg.profile.Name, c.cfg.profileName)
	}
	uid := os.Getuid()
	roots, err := domain.DefaultRoots(os.Getenv, uid)
	if err != nil {
		return err
	}
	c.paths, err = domain.PathsFor(roots, domain.DeriveID(c.cfg.profileName, c.cfg.workspace))
	if err != nil {
		return err
	}
	c.log = c.log.With("domain_id", string(c.paths.ID))
	if err := domain.VerifyOrRecordIdentity(c.paths, c.cfg.profileName, c.cfg.workspace); err != nil {
		return err
	}
	if err := domain.EnsurePrivateDir(roots.Runtime, uid); err != nil {
		return err
	}
	if err := domain.EnsurePrivateDir(c.paths.RuntimeDir, uid); err != nil {
		return err
	}
	runscPath, err := locate.Find(locate.Runsc, os.Getenv)
	if err != nil {
		return err
	}
	rt := runsc.Runtime{Path: runscPath, Root: c.paths.RunscRoot()}
	rsPath, err := locate.Find(locate.RS, os.Getenv)
	if err != nil {
		return err
	}
	escalate, err := locate.Find(locate.Escalate, os.Getenv)
	if err != nil {
		return err
	}
	guestInit, err := locate.Find(locate.Init, os.Getenv)
	if err != nil {
		return err
	}
	if c.cfg.gitRouteExe, err = locate.Find(locate.GitRoute, os.Getenv); err != nil {
		return err
	}
	// RS runs its preparer from lazaret-cli, only for a start that must
	// prepare its lower: without it, such a start fails and says so.
	if c.cfg.preparerExe, err = locate.Find(locate.CLI, os.Getenv); err != nil {
		c.log.Warn("no preparer for a prepared lower: a start that must prepare one fails", "err", err)
		c.cfg.preparerExe = ""
	}
	if c.broker, err = proc.NewBrokerWrapped(c.log, c.wrapperExecutable(), locate.HC); err != nil {
		return err
	}
	// RS runs its egress role and its wrappers from this (smaller) binary
	// when it names itself reliably, else from lazaret-rs; the Git-routing
	// daemon from the front (wrapperExecutable).
	rolesExe, err := locate.Self()
	if err != nil {
		c.log.Warn("the runtime supervisor runs its roles from lazaret-rs", "err", err)
		rolesExe = ""
	}
	// RS inherits the init's end of the first session's socket.
	if c.first, err = newFirstSlot(); err != nil {
		c.log.Warn("no first-session socket: every session attaches with runsc exec", "err", err)
		c.first = nil
	}
	// RS's clone, wrapper and id maps proceed meanwhile; it stays at its
	// barrier until the trust anchor exists (supervisor.Driver).
	c.rs = c.spawnSupervisor(rsPath, rolesExe, logLevel)
	// The developer's Git configuration (its identity for the guest environment, and
	// what host Git runs or reads from the workspace for the Git Sentry)
	// is read while the store opens and recovery runs: a Git start-up is
	// ~15 ms here.
	hostGitConfig := c.readHostGitConfig()
	// The start scan of the sticky ignored paths reads the workspace, its
	// state and the record, all under the Domain lock held here: it walks
	// the workspace while the store opens and recovery runs (on a large
	// workspace the walk is most of the time before StartSandbox).
	c.stickyScan = gitrouting.BeginStickyScan(c.cfg.workspace, c.paths.DomainRoot, c.paths.IgnoredStateDir(), c.cfg.profile.IgnoredPathIsolation)
	if err := c.hostSupport(); err != nil {
		return err
	}
	if err := c.openStore(rt); err != nil {
		return err
	}
	c.timing.Mark("store open")
	settled, err := c.recoverGenerations()
	if err != nil {
		return err
	}
	c.recoverStaleRuntime()
	c.timing.Mark("recovery done")
	c.cfg.coordinatorID = randomID()
	sandboxID, sidecarID := randomID(), randomID()
	if err := c.beginGeneration(sandboxID, sidecarID, settled); err != nil {
		return err
	}
	c.timing.Mark("generation recorded")
	c.mtStartDomain(c.generation-1, os.Getenv)
	c.sb.Begin(sandbox.Generation{Number: c.generation, CoordinatorID: c.cfg.coordinatorID})
	c.log = c.log.With("generation", c.generation)
	for _, d := range []string{c.paths.RunscRoot(), c.paths.BundleDir(), filepath.Join(c.paths.ControlMountSource(), "bin"), c.sessionDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// Inside, every guest user reaches the control mount (/.lazaret) and
	// runs lazaret-escalate (and lazaret-init, the init and session
	// launcher); host side it stays in the private runtime
	// directory.
	for _, d := range []string{c.paths.ControlMountSource(), filepath.Join(c.paths.ControlMountSource(), "bin")} {
		if err := os.Chmod(d, controlDirMode); err != nil {
			return err
		}
	}
	// The guest binaries (about 10 MB) are hard links to the runtime
	// root's copy of this build (package guestbin), made beside RS's
	// release and start-up, not before them: nothing reads them before
	// StartSandbox, which waits for them (sandboxStart).
	binaries := make(chan error, 1)
	c.guestBinaries = binaries
	go func() {
		srcs := []guestbin.Source{{Name: locate.Escalate, Path: escalate}, {Name: locate.Init, Path: guestInit}}
		res, err := guestbin.Install(roots.Runtime, filepath.Join(c.paths.ControlMountSource(), "bin"), srcs, time.Now)
		if err != nil {
			binaries <- fmt.Errorf("install the guest binaries into the control mount: %w", err)
			return
		}
		switch {
		case res.CacheErr != nil:
			c.log.Warn("guest binaries copied: their cache in the runtime root cannot be written", "cache_key", res.Key, "err", res.CacheErr)
		case res.Made || !res.Linked:
			c.log.Info("guest binaries installed", "cache_key", res.Key, "copied_into_cache", res.Made, "linked", res.Linked)
		}
		binaries <- nil
	}()
	// Whether the Storage Catalog lets RS reuse the prepared lower it finds
	// (StartSandbox.reusable_artifact_id), read beside RS's start; the
	// lease of that lower is then taken ahead of RS's request.
	c.reusableLower = c.lower.LeaseAhead(context.Background())
	// The host's Git configuration is needed from StartSandbox on (the
	// guest's Git identity, the daemon's guard), not for RS's release:
	// sandboxStart waits for it, so that a Git slower than the store (a
	// large or networked configuration) does not hold RS back.
	c.hostGit = hostGitConfig
	c.routing = c.newRouting()
	c.cfg.guest = newGuestEnv(c.cfg.workspace, c.cfg.profileName, c.paths.ID, c.cfg.profile, nil)
	c.net = c.newNetwork(sidecarID) // shares the guest's hostname
	// The generation's ephemeral Trust Anchor: TLS CA, protocol issuer,
	// coordinator leaves and the sandbox request-signing key (spec §3.2).
	if c.anchor, err = trust.NewAnchor(trust.GenerationIdentity{
		DomainID: string(c.paths.ID), Generation: c.generation, CoordinatorID: c.cfg.coordinatorID,
		Profile: c.cfg.profileName, ConfigFingerprint: c.cfg.profile.Fingerprint(),
	}, sandboxID, trust.Options{}); err != nil {
		return err
	}
	c.emit("CreateTrustAnchor", c.dom())
	c.timing.Mark("trust anchor created")
	c.rs.ReleaseStage()
	serverTLS, err := c.anchor.ServerTLSConfig()
	if err != nil {
		return err
	}
	if err := c.writeSandboxCredentials(); err != nil {
		return err
	}
	if c.esc, err = c.newEscalation(); err != nil {
		return err
	}
	// Publish before listening: a CLI that reaches the socket finds the
	// publication that authenticates it (publication.(*Service).Begin).
	c.pub = publication.New(publication.Config{Log: c.log, Store: c.store, Generation: c.generation,
		Fingerprint: c.cfg.profile.Fingerprint(), Socket: c.paths.ControlSocket(), File: c.paths.Publication(), TLS: serverTLS})
	if err := c.pub.Begin(c.anchor.Publication()); err != nil {
		return err
	}
	c.log.Info("host coordinator started", "workspace", c.cfg.workspace, "profile", c.cfg.profileName, "image", c.cfg.image, "container", c.sb.Container())
	return nil
}

func (c *coordinator) sessionDir() string { return filepath.Join(c.paths.RuntimeDir, "sessions") }

func (c *coordinator) runscQuiet(argv []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, stderr, st, err := c.broker.Output(ctx, "runsc", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}, 64<<10)
	if err != nil || st.ShellCode() != 0 {
		c.log.Debug("runsc", "argv", strings.Join(argv[1:], " "), "status", st.String(), "err", err, "stderr", strings.TrimSpace(string(stderr)))
	}
}

// withLogHint adds to a start's failure where the Domain log, which has the
// failing component's own lines, is read — unless it is a refusal or a
// bad input whose message is the whole story. The error's categories are
// kept (errors.Is).
func (c *coordinator) withLogHint(err error) error {
	if errors.Is(err, errdefs.ErrRefused) || errors.Is(err, errdefs.ErrInvalid) {
		return err
	}
	return fmt.Errorf("%w; its log: `lazaret logs -p %s` (%s)", err, c.cfg.profileName, c.paths.Log())
}

func (c *coordinator) setState(s state, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st == stateStopping || c.st == stateFailed {
		return
	}
	prev := c.st
	c.st = s
	if err != nil {
		c.failErr = err
		if s == stateFailed && prev == stateStarting {
			// What the sessions are told; the log has the failure itself.
			c.failErr = c.withLogHint(err)
		}
	}
	if prev == stateStarting && s == stateRunning {
		c.mt.Publish()
		if c.lower != nil {
			c.lower.Published()
		}
	}
	if s == stateFailed {
		c.mt.Fail()
		c.startFailed = prev == stateStarting
	}
	if prev == stateStarting && (s == stateRunning || s == stateFailed) {
		close(c.ready)
	}
	if prev == stateStarting && s == stateRunning {
		// Published: give back what starting the Domain needed.
		idlemem.SettleSoon(c.log)
		if c.routing != nil && c.routing.Wanted() {
			go c.watchHostGit(c.hostGitStart)
		}
	}
	if s == stateFailed {
		c.log.Error("generation failed", "err", err)
		c.requestTeardownLocked()
	}
}

// requestTeardownLocked moves the generation to stopping (unless failed):
// from now on no session registers. c.mu is held.
func (c *coordinator) requestTeardownLocked() {
	c.mt.Teardown()
	if c.st == stateStarting {
		close(c.ready)
	}
	if c.st != stateFailed {
		c.st = stateStopping
	}
	if c.failErr == nil {
		c.failErr = errStopping
	}
	select {
	case <-c.teardownC:
	default:
		close(c.teardownC)
	}
}

func (c *coordinator) addProgress(line string) {
	c.mu.Lock()
	c.progress = append(c.progress, line)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// idleWatch tears the Domain down if no session ever arrives (the starting
// CLI died before connecting).
func (c *coordinator) idleWatch(idle time.Duration) {
	time.Sleep(idle)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions.Idle() {
		c.log.Warn("no session arrived: tearing down", "idle_timeout", idle)
		c.requestTeardownLocked()
	}
}

// openStarter returns a pidfd handle of pid, the `lazaret run` that
// starts this coordinator and is its parent, or gone when that process
// has already exited. Neither (nil, false) when pid is unknown (0) or is
// not this coordinator's parent: idleWatch then covers a starter that
// never connects.
func openStarter(pid int) (h *pidfs.Handle, gone bool) {
	if pid <= 0 {
		return nil, false
	}
	h, err := pidfs.Open(pid)
	if errors.Is(err, unix.ESRCH) {
		return nil, true // exited and reaped
	}
	if err != nil {
		return nil, false
	}
	exited := func() bool {
		t, err := h.Terminated()
		return err == nil && t
	}
	if exited() {
		h.Close()
		return nil, true
	}
	if os.Getppid() != pid {
		// Not the parent: exited meanwhile (its children were handed to
		// a reaper), or not the starter at all.
		gone = exited()
		h.Close()
		return nil, gone
	}
	return h, false
}

// starterWatch tears the Domain down as soon as the `lazaret run` that
// started this coordinator (starter; nil: gone before the watch began) has
// exited while no session ever arrived — it was interrupted or died before
// its session registered — rather than after idleWatch's timeout:
// meanwhile a changed configuration would be refused against a Domain
// nobody uses. It acts once the generation's start has ended (published or
// failed), as idleWatch does: a start is not cut short by it.
func (c *coordinator) starterWatch(starter *pidfs.Handle, pid int, idle time.Duration) {
	deadline := time.Now().Add(idle)
	if starter != nil {
		defer starter.Close()
		if gone, err := starter.WaitTerminated(idle); err != nil || !gone {
			return
		}
	}
	select {
	case <-c.ready:
	case <-time.After(time.Until(deadline)):
		return // idleWatch's turn
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions.Idle() {
		c.log.Warn("the lazaret run that started the Domain is gone and no session arrived: tearing down", "starter_pid", pid)
		c.requestTeardownLocked()
	}
}

// teardown stops everything of the generation and releases the Domain,
// walking its declared steps (teardown.go).
func (c *coordinator) teardown() {
	c.mu.Lock()
	c.requestTeardownLocked()
	c.st = stateStopping
	sessions := c.sessions.All()
	rsChild := c.rs.Child()
	c.mu.Unlock()
	c.log.Info("tearing down")
	failpoint.Hit("lazaret-hc:teardown-begin")
	c.walkTeardown(c.teardownSteps(sessions, rsChild))
	c.log.Info("domain stopped")
}

// cleanupRuntime removes the generation's runtime files (never the Domain
// Root), except runsc state whose processes were not proven gone
// (finishSandbox removes the current generation's once they are): the next
// recovery checks the pids it names and never signals them.
func (c *coordinator) cleanupRuntime() {
	if c.paths.RuntimeDir == "" {
		return
	}
	sandbox.RemoveRuntimeExceptRunscState(c.log, c.paths.RuntimeDir, c.paths.RunscRoot())
}
