package hc

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/gitconfigguard"
	"github.com/lazaret/lazaret/pkg/hclog"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/slirp"
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
	rsStopWait   = 30 * time.Second
	drainTimeout = 2 * time.Second
	closeGrace   = 2 * time.Second
)

// errStopping refuses a session because the Domain is stopping normally;
// the CLI retries (and starts a new generation once this one is gone).
var errStopping = errdefs.New(errdefs.ErrUnavailable, "the Domain is stopping")

type coordinator struct {
	timing    *timing.Recorder // nil unless LAZARET_DEBUG=timing
	profileFD int
	profile   *config.Profile // the validated Agent Profile of this generation
	limits    config.Limits   // the effective resource limits of this generation
	log       *slog.Logger
	broker    *proc.Broker
	paths     domain.Paths
	ws        string
	prof      string
	image     string
	level     string
	idle      time.Duration

	rt           runsc.Runtime
	rsPath       string
	lockFile     *os.File
	generation   uint64
	coordinator  string
	container    string
	hostname     string
	baseEnv      []string
	listener     *net.UnixListener
	rsChild      *proc.Child
	rsChan       *fdpass.Channel
	lifetimeW    *os.File
	policy       netpolicy.Policy
	store        *store.Store   // the Domain Store (only this process opens it)
	self         pidfs.Identity // this coordinator's own pidfs identity
	retained     []retained     // records recovery refused to act on
	anchor       *trust.Anchor
	esc          *escalations      // host escalation (escalation.go)
	rsCred       *trust.Credential // the runtime supervisor's protocol credential
	tlsConfig    *tls.Config
	sandboxID    string
	stagedRunsc  *lv1.StagedProcessOwnership
	sandboxReady *lv1.SandboxReady
	net          networkState
	portsMu      sync.Mutex // serialises port forwards (ports.go)
	routing      gitRouting
	wantRouting  bool // the generation asked RS for a Git-routing daemon
	egress       egressState
	sticky       stickyState
	// gitGuard is what host Git runs or reads from the workspace
	// (gitconfig.go), kept read-only by the Git-routing daemon.
	gitGuard []gitconfigguard.Path
	// leasedArtifact is the prepared artifact whose lease is recorded;
	// anchorsUnmounted the anchor mount IDs RS reported unmounted (lease.go).
	leasedArtifact   string
	anchorsUnmounted []uint64

	mu       sync.Mutex
	st       state
	failErr  error
	ready    chan struct{} // closed when running or failed
	progress []string
	changed  chan struct{} // closed and replaced on every progress line
	active   int           // registered or waiting sessions
	// stopRequested: `lazaret stop` is ending the sessions; no session
	// registers any more (stop.go).
	stopRequested bool
	everHad       bool
	// linger is the longest time any session of this generation asked the
	// Domain to stay up after its last session leaves; while it lingers,
	// lingerTimer ends it at lingerUntil unless a session joins.
	linger      time.Duration
	lingerTimer *time.Timer
	lingerUntil time.Time
	sessions    map[string]*session
	sessionWG   sync.WaitGroup // sessions still writing to their clients
	teardownC   chan struct{}
	stopped     chan struct{} // RS reported SupervisorStopped
	// mt is what this coordinator recorded in the model trace
	// (modelsteps.go); untouched unless LAZARET_MODEL_TRACE is set.
	mt modelSteps
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
	if err := fs.Parse(args); err != nil {
		return 2
	}
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
	log.Info(hclog.StartMarker)
	if *lockFD < 3 || *readyFD < 3 || *profileFD < 3 {
		fmt.Fprintln(os.Stderr, "lazaret-hc is started by lazaret, not by hand (missing --lock-fd/--ready-fd/--profile-fd)")
		return 2
	}
	ready := os.NewFile(uintptr(*readyFD), "ready")
	unix.CloseOnExec(*readyFD)
	unix.CloseOnExec(*lockFD)
	c := &coordinator{timing: rec, profileFD: *profileFD, log: log, ws: *ws, prof: *prof, image: *image, level: *level, idle: *idle,
		lockFile: os.NewFile(uintptr(*lockFD), "lifecycle.lock"),
		ready:    make(chan struct{}), changed: make(chan struct{}), sessions: map[string]*session{},
		teardownC: make(chan struct{}), stopped: make(chan struct{})}
	if err := c.init(); err != nil {
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
	go c.idleWatch()
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
// control socket. Nothing of the generation exists yet.
func (c *coordinator) init() error {
	// The inherited descriptor must hold the Domain lock: re-locking our own
	// open file description succeeds only if it is ours (or free).
	if err := unix.Flock(int(c.lockFile.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errdefs.New(errdefs.ErrRefused, "lazaret-hc does not hold the Domain lock: %v", err)
	}
	if !domain.ValidProfileName(c.prof) || !filepath.IsAbs(c.ws) || c.image == "" {
		return errdefs.New(errdefs.ErrInvalid, "bad coordinator arguments (profile %q workspace %q image %q)", c.prof, c.ws, c.image)
	}
	// The profile arrives as canonical bytes in a sealed memfd: trusted
	// configuration, validated by the CLI, re-validated here.
	raw, err := fdpass.ReadSealedMemfd(c.profileFD, 1<<20)
	if err != nil {
		return err
	}
	if c.profile, err = config.FromCanonical(raw); err != nil {
		return errdefs.Mark(fmt.Errorf("profile from the CLI: %w", err), errdefs.ErrCorrupt)
	}
	if c.profile.Name != c.prof {
		return errdefs.New(errdefs.ErrRefused, "profile bytes name %q, not %q", c.profile.Name, c.prof)
	}
	uid := os.Getuid()
	roots, err := domain.DefaultRoots(os.Getenv, uid)
	if err != nil {
		return err
	}
	c.paths, err = domain.PathsFor(roots, domain.DeriveID(c.prof, c.ws))
	if err != nil {
		return err
	}
	c.log = c.log.With("domain_id", string(c.paths.ID))
	if err := domain.VerifyOrRecordIdentity(c.paths, c.prof, c.ws); err != nil {
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
	c.rt = runsc.Runtime{Path: runscPath, Root: c.paths.RunscRoot()}
	if c.rsPath, err = locate.Find(locate.RS, os.Getenv); err != nil {
		return err
	}
	escalate, err := locate.Find(locate.Escalate, os.Getenv)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if c.broker, err = proc.NewBroker(c.log, exe); err != nil {
		return err
	}
	// The developer's Git configuration (its identity for guestEnv, and
	// what host Git runs or reads from the workspace for the Git Sentry)
	// is read while the store opens and recovery runs: a Git start-up is
	// ~15 ms here.
	hostGitConfig := c.readHostGitConfig()
	if err := c.hostSupport(); err != nil {
		return err
	}
	if err := c.openStore(); err != nil {
		return err
	}
	c.timing.Mark("store open")
	c.recoverGenerations()
	c.recoverStaleRuntime()
	c.timing.Mark("recovery done")
	c.coordinator = randomID()
	c.sandboxID = randomID()
	c.net.sidecarID = randomID()
	if err := c.beginGeneration(); err != nil {
		return err
	}
	c.timing.Mark("generation recorded")
	c.mtStartDomain(c.generation-1, os.Getenv)
	c.container = runsc.ContainerID(string(c.paths.ID), c.generation)
	c.hostname = domain.SanitizeHostname(filepath.Base(c.ws))
	c.log = c.log.With("generation", c.generation)
	for _, d := range []string{c.paths.RunscRoot(), c.paths.BundleDir(), filepath.Join(c.paths.ControlMountSource(), "bin"), c.sessionDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// Inside, every guest user reaches the control mount (/.lazaret) and
	// runs lazaret-escalate; host side it stays in the private runtime
	// directory.
	for _, d := range []string{c.paths.ControlMountSource(), filepath.Join(c.paths.ControlMountSource(), "bin")} {
		if err := os.Chmod(d, controlDirMode); err != nil {
			return err
		}
	}
	if err := copyExecutable(escalate, filepath.Join(c.paths.ControlMountSource(), "bin", locate.Escalate)); err != nil {
		return fmt.Errorf("install %s into the control mount: %w", locate.Escalate, err)
	}
	gitCfg, err := hostGitConfig()
	if err != nil {
		return err
	}
	c.gitGuard = gitCfg.Paths
	c.baseEnv = c.guestEnv(gitIdentity(gitCfg.Effective))
	// The generation's ephemeral Trust Anchor: TLS CA, protocol issuer,
	// coordinator leaves and the sandbox request-signing key (spec §3.2).
	if c.anchor, err = trust.NewAnchor(trust.GenerationIdentity{
		DomainID: string(c.paths.ID), Generation: c.generation, CoordinatorID: c.coordinator,
		Profile: c.prof, ConfigFingerprint: c.profile.Fingerprint(),
	}, c.sandboxID, trust.Options{}); err != nil {
		return err
	}
	c.emit("CreateTrustAnchor", c.dom())
	if c.tlsConfig, err = c.anchor.ServerTLSConfig(); err != nil {
		return err
	}
	if err := c.writeSandboxCredentials(); err != nil {
		return err
	}
	if c.esc, err = newEscalations(c); err != nil {
		return err
	}
	// Publish before listening: a CLI that reaches the socket finds the
	// publication that authenticates it.
	if err := c.publish(); err != nil {
		return err
	}
	sock := c.paths.ControlSocket()
	os.Remove(sock) // stale from a dead generation: we hold the lock
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return errdefs.Mark(fmt.Errorf("listen on %s: %w", sock, err), errdefs.ErrUnsupportedHost)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		l.Close()
		return err
	}
	c.listener = l
	c.log.Info("host coordinator started", "workspace", c.ws, "profile", c.prof, "image", c.image, "container", c.container)
	return nil
}

// hostSupport refuses an unqualified kernel and runs the per-boot
// PidfsHostSupportProbe before the first generation of this boot, caching
// success only under the current boot ID (spec §3.2).
func (c *coordinator) hostSupport() error {
	host := hostcheck.Real(nil)
	for _, m := range c.profile.Mounts(c.ws) {
		if !m.ReadOnly {
			host.SandboxWritable = append(host.SandboxWritable, m.Source)
		}
	}
	if err := host.Kernel(); err != nil {
		return err
	}
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return errdefs.Mark(err, errdefs.ErrUnsupportedHost)
	}
	dir := filepath.Join(c.paths.StorageRoot, "host")
	cache := filepath.Join(dir, "pidfs-probe."+boot.String())
	if b, err := os.ReadFile(cache); err == nil && strings.TrimSpace(string(b)) == proc.ProbeVersion {
		return nil
	}
	start := time.Now()
	rep, err := c.broker.PidfsHostSupportProbe(context.Background())
	if err != nil {
		return err
	}
	c.log.Info("pidfs host support probe passed", "boot_id", boot.String(), "duration", time.Since(start), "observations", len(rep.Observations))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// Entries of earlier boots are stale: only the current boot's counts.
	if old, _ := filepath.Glob(filepath.Join(dir, "pidfs-probe.*")); len(old) > 0 {
		for _, o := range old {
			os.Remove(o)
		}
	}
	return os.WriteFile(cache, []byte(proc.ProbeVersion+"\n"), 0o600)
}

func (c *coordinator) sessionDir() string { return filepath.Join(c.paths.RuntimeDir, "sessions") }

// recoverStaleRuntime removes what a dead generation left in the runtime
// directory, after recoverGenerations. The Domain lock (held by us, and by
// a Runtime Supervisor until it exits) proves no other coordinator or
// supervisor of this Domain lives. runsc state is removed only for a
// container whose generation's sandbox is Clean (its processes were proven
// gone) or, with no record at all, once its pids are free
// (reconcileRunsc); a retained generation's state is kept. No runsc
// command runs: `runsc delete` would SIGKILL the state file's pids.
func (c *coordinator) recoverStaleRuntime() {
	ids, _ := runsc.StateContainers(c.paths.RunscRoot())
	prefix := "lazaret-" + string(c.paths.ID) + "-"
	for _, id := range ids {
		gs, ok := strings.CutPrefix(id, prefix)
		g, err := strconv.ParseUint(gs, 10, 64)
		if !ok || err != nil {
			continue // not a container of this Domain: never ours to touch
		}
		var p *store.Participant
		c.store.View(func(tx *store.Tx) error {
			p, _ = tx.Participant(g, participant.Sandbox)
			return nil
		})
		switch {
		case c.isRetained(g):
			// recoverGenerations refused it: the state names what is left.
		case p != nil && p.Phase == participant.Clean:
			c.log.Warn("removing runsc state of a Clean generation", "container", id)
			if err := runsc.RemoveState(c.rt.Root, id); err != nil {
				c.log.Warn("remove runsc state", "container", id, "err", err)
			}
		default:
			if _, refusals := c.reconcileRunsc(g, id, nil); len(refusals) > 0 {
				c.retain(g, "runsc_state", strings.Join(refusals, "; "))
			}
		}
	}
	// The helper's API socket of a killed generation stays behind (only
	// a helper that exits normally unlinks it) and would make the next
	// helper's bind fail.
	for _, d := range []string{c.paths.BundleDir(), c.paths.ControlMountSource(), c.sessionDir(), c.apiSocket()} {
		os.RemoveAll(d)
	}
	if len(c.keptRunscState()) == 0 {
		os.RemoveAll(c.paths.RunscRoot())
	}
}

// isRetained reports whether recovery retained a record of generation g.
func (c *coordinator) isRetained(g uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.retained {
		if r.Generation == g {
			return true
		}
	}
	return false
}

func (c *coordinator) runscQuiet(argv []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, stderr, st, err := c.broker.Output(ctx, "runsc", proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}, 64<<10)
	if err != nil || st.ShellCode() != 0 {
		c.log.Debug("runsc", "argv", strings.Join(argv[1:], " "), "status", st.String(), "err", err, "stderr", strings.TrimSpace(string(stderr)))
	}
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// guestEnv is the environment of every guest process: a standard PATH, and
// the developer's Git identity as command-line-level Git configuration so
// that `git commit` works inside without touching the host's ~/.gitconfig.
func (c *coordinator) guestEnv(gitIdentity []gitSetting) []string {
	env := []string{
		// lazaret-escalate is found last, at its fixed path.
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + path.Dir(ocispec.InitPath),
		"HOME=/root",
		"USER=root",
		"HOSTNAME=" + c.hostname,
		"LAZARET=1",
		"LAZARET_PROFILE=" + c.prof,
		"LAZARET_DOMAIN_ID=" + string(c.paths.ID),
	}
	// The profile's environment (names Lazaret sets are refused at config
	// check; PATH, HOME and USER may be overridden).
	names := make([]string, 0, len(c.profile.Env))
	for k := range c.profile.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		env = setEnv(env, k, c.profile.Env[k])
	}
	if c.profile.Network.Mode == config.ModeAllowlist {
		// Every guest process finds the egress proxy (sessions add their
		// label); a variable the profile sets wins.
		for k, v := range proxyEnv("") {
			if _, set := c.profile.Env[k]; !set {
				env = setEnv(env, k, v)
			}
		}
	}
	if len(gitIdentity) > 0 {
		env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(gitIdentity)))
		for i, g := range gitIdentity {
			env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, g.key), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, g.value))
		}
	}
	return env
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
	}
	if prev == stateStarting && s == stateRunning {
		c.mtPublishLocked()
	}
	if s == stateFailed {
		c.mtFailLocked()
	}
	if prev == stateStarting && (s == stateRunning || s == stateFailed) {
		close(c.ready)
	}
	if s == stateFailed {
		c.log.Error("generation failed", "err", err)
		c.requestTeardownLocked()
	}
}

// requestTeardownLocked moves the generation to stopping (unless failed):
// from now on no session registers. c.mu is held.
func (c *coordinator) requestTeardownLocked() {
	c.mtTeardownLocked()
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
func (c *coordinator) idleWatch() {
	time.Sleep(c.idle)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.everHad && c.active == 0 {
		c.log.Warn("no session arrived: tearing down", "idle_timeout", c.idle)
		c.requestTeardownLocked()
	}
}

// startGeneration acquires the Runtime Supervisor and drives it to ready.
func (c *coordinator) startGeneration() {
	c.startSticky()
	if err := c.launchSupervisor(); err != nil {
		c.setState(stateFailed, err)
		return
	}
	// The connectivity helper starts while RS starts up: it needs only RS's
	// network namespace, which exists from the clone on (read through RS's
	// pidfd). StartSandbox waits only for the network's identity
	// (prepareNetwork); the helper's readiness gates the attached runsc
	// (commitStaged), so the prepared lower, State Anchors and Git routing
	// are set up while the helper starts.
	prepared := make(chan error, 1)
	helper := make(chan error, 1)
	started := make(chan struct{})
	c.mu.Lock()
	c.net.started = started
	c.net.helperReady = helper
	c.mu.Unlock()
	go func() {
		defer close(started)
		dev, ino, err := c.rsChild.Handle().NetNamespace()
		if err == nil {
			err = c.prepareNetwork(&lv1.NamespaceIdentity{Dev: dev, Ino: ino})
		}
		prepared <- err
		if err == nil {
			err = c.startHelper()
		}
		helper <- err
	}()
	c.superviseMessages(prepared)
}

func (c *coordinator) launchSupervisor() error {
	host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
	uids, gids, err := host.SubIDs()
	if err != nil {
		return err
	}
	newuidmap, newgidmap, err := host.IDMapTools()
	if err != nil {
		return err
	}
	policy, err := c.derivePolicy()
	if err != nil {
		return err
	}
	c.policy = policy
	policyFile, err := fdpass.SealedMemfd("lazaret-network-policy", policy.Canonical())
	if err != nil {
		return err
	}
	defer policyFile.Close()
	// RS signs its ownership messages with its own protocol credential and
	// verifies HC's with the coordinator's public key.
	rsPub, rsKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		return err
	}
	if c.rsCred, err = c.anchor.IssueCredential(trust.RoleRuntimeSupervisor, randomID(), rsPub); err != nil {
		return err
	}
	credJSON, _ := json.Marshal(rsCredentialFile{KeySeed: rsKey.Seed(), CoordinatorPublicKey: c.anchor.CoordinatorCredential().Claims.PublicKey})
	credFile, err := fdpass.SealedMemfd("lazaret-rs-credential", credJSON)
	clear(rsKey)
	if err != nil {
		return err
	}
	defer credFile.Close()
	ch, peer, err := fdpass.Pair()
	if err != nil {
		return err
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return err
	}
	c.rsChan, c.lifetimeW = ch, lifeW
	uid, gid := os.Getuid(), os.Getgid()
	c.timing.Mark("starting the runtime supervisor")
	child, err := c.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot: "rs",
		Target: proc.Command{
			Path: c.rsPath,
			Args: []string{locate.RS, "--channel-fd=3", "--lifetime-fd=4", "--lock-fd=5", "--policy-fd=6", "--credential-fd=7", "--log-level=" + c.level},
			Env:  c.supervisorEnv(),
			Dir:  "/",
			// stdin /dev/null; stdout/stderr to the coordinator log.
			Files:      []*os.File{nil, os.Stderr, os.Stderr, peer, lifeR, c.lockFile, policyFile, credFile},
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET,
		},
		// Full subordinate map: 0 → the developer, 1..65536 → subordinate
		// ids. The uid and gid maps are independent: both tools run at once.
		Setup: func(ctx context.Context, h *pidfs.Handle) error {
			pid := strconv.Itoa(h.PID())
			maps := []struct {
				tool, id string
				r        hostcheck.SubIDRange
			}{{newuidmap, strconv.Itoa(uid), uids}, {newgidmap, strconv.Itoa(gid), gids}}
			errs := make([]error, len(maps))
			var wg sync.WaitGroup
			for i, m := range maps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					argv := []string{filepath.Base(m.tool), pid, "0", m.id, "1", "1", strconv.FormatUint(uint64(m.r.Start), 10), strconv.FormatUint(uint64(m.r.Count), 10)}
					_, stderr, st, err := c.broker.Output(ctx, argv[0], proc.Command{Path: m.tool, Args: argv, Env: []string{"PATH=/usr/bin:/bin"}}, 4096)
					if err == nil && st.ShellCode() != 0 {
						err = errdefs.New(errdefs.ErrUnsupportedHost, "%s failed (%s): %s; check /etc/subuid and /etc/subgid for your user", argv[0], st, strings.TrimSpace(string(stderr)))
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			return errors.Join(errs...)
		},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			c.log.Debug("staged ownership", "slot", "rs", "identity", id.String())
			if err := c.recordSandbox(participant.Intent, store.StagedSlot(id), unassignedSlot(), nil); err != nil {
				return err
			}
			// RS exists (held at the barrier) under the lifetime lease.
			c.mu.Lock()
			c.emit("StartRuntimeSupervisor", c.dom())
			c.mt.rs = true
			c.mu.Unlock()
			return nil
		},
	})
	peer.Close()
	lifeR.Close()
	if err != nil {
		return fmt.Errorf("start runtime supervisor: %w", err)
	}
	c.timing.Mark("runtime supervisor started (id maps written)")
	c.mu.Lock()
	c.rsChild = child
	c.mu.Unlock()
	c.failOnUnexpectedExit(child, "the runtime supervisor exited unexpectedly")
	return nil
}

// failOnUnexpectedExit fails the generation (which tears it down) when
// child exits while the Domain is neither stopping nor already failed.
// supervisorEnv is the Runtime Supervisor's whole environment.
func (c *coordinator) supervisorEnv() []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.Getenv("HOME")}
	if p := os.Getenv(timing.EnvFile); p != "" && c.timing != nil {
		env = append(env, timing.EnvFile+"="+p)
	}
	if modeltrace.On() {
		env = append(append(env, modeltrace.Environ()...), modeltrace.GenerationEnv(c.dom(), c.generation))
	}
	return env
}

func (c *coordinator) failOnUnexpectedExit(child *proc.Child, what string) {
	go func() {
		<-child.Done()
		st, _ := child.Status()
		c.mu.Lock()
		stopping := c.st == stateStopping || c.st == stateFailed
		c.mu.Unlock()
		if !stopping {
			c.setState(stateFailed, errdefs.New(errdefs.ErrUnavailable, "%s (%s); see %s", what, st, c.paths.Log()))
		}
	}()
}

func (c *coordinator) superviseMessages(prepared <-chan error) {
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	var first lv1.SupervisorMessage
	err := c.rsChan.Recv(ctx, &first)
	cancel()
	if err != nil {
		c.setState(stateFailed, fmt.Errorf("runtime supervisor hello: %w", err))
		return
	}
	if f := first.GetFailure(); f != nil {
		c.setState(stateFailed, errdefs.Mark(errors.New(f.Message), errdefs.FromCategory(f.Category)))
		return
	}
	hello := first.GetHello()
	if hello == nil {
		c.setState(stateFailed, errdefs.New(errdefs.ErrCorrupt, "runtime supervisor's first message is not a hello"))
		return
	}
	if err := <-prepared; err != nil {
		c.setState(stateFailed, err)
		return
	}
	c.log.Info("runtime supervisor hello verified")
	c.timing.Mark("runtime supervisor hello verified")
	start, err := c.sandboxStart(hello)
	if err != nil {
		c.setState(stateFailed, err)
		return
	}
	failpoint.Hit("lazaret-hc:hello-verified")
	if err := c.rsChan.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Start{Start: start}}); err != nil {
		c.setState(stateFailed, err)
		return
	}
	for {
		var m lv1.SupervisorMessage
		if err := c.rsChan.Recv(context.Background(), &m); err != nil {
			c.mu.Lock()
			stopping := c.st == stateStopping
			c.mu.Unlock()
			if !stopping {
				c.setState(stateFailed, fmt.Errorf("runtime supervisor channel: %w", err))
			}
			return
		}
		switch {
		case m.GetProgress() != nil:
			c.addProgress(m.GetProgress().GetMessage())
		case m.GetArtifact() != nil:
			if err := c.acquireLower(context.Background(), m.GetArtifact(), hello); err != nil {
				c.setState(stateFailed, err)
				return
			}
		case m.GetAnchorsMounted() != nil:
			if err := c.recordAnchorsMounted(m.GetAnchorsMounted(), hello); err != nil {
				c.setState(stateFailed, err)
				return
			}
		case m.GetNetworkAsk() != nil:
			go c.decideNetworkAsk(m.GetNetworkAsk())
		case m.GetStaged() != nil:
			if err := c.commitStaged(m.GetStaged()); err != nil {
				c.setState(stateFailed, err)
				return
			}
		case m.GetReady() != nil:
			r := m.GetReady()
			c.mu.Lock()
			ok := c.stagedRunsc != nil && bytesEqualIdentity(c.stagedRunsc.Identity, r.AttachedRunsc)
			c.sandboxReady = r
			c.mu.Unlock()
			if !ok {
				c.setState(stateFailed, errdefs.New(errdefs.ErrRefused, "SandboxReady names an attached runsc that was not staged"))
				return
			}
			if d := c.policy.Digest(); string(r.PolicyDigest) != string(d[:]) {
				c.setState(stateFailed, errdefs.New(errdefs.ErrRefused, "the runtime supervisor attests network policy %x, not the derived %x", r.PolicyDigest, d[:]))
				return
			}
			// The supervisor's evidence — the routes it observed — must
			// enforce the policy this coordinator derived, whatever it echoes.
			if err := c.policy.VerifyRoutes(c.policyRoutes(r.ObservedRoutes), slirp.Tap, c.net.addr.Gateway); err != nil {
				c.setState(stateFailed, errdefs.Mark(fmt.Errorf("the runtime supervisor's observed routes do not enforce the derived network policy: %w", err), errdefs.ErrRefused))
				return
			}
			c.timing.Mark("sandbox ready")
			c.log.Info("sandbox ready", "prepared_artifact", r.PreparedArtifactId, "manifest", r.ManifestDigest, "routes", strings.Join(r.ObservedRoutes, "; "))
			// Step 9: the sandbox is ready; one transaction commits the exact
			// staged RS and attached runsc ownership with the container.
			c.mu.Lock()
			runscID, err := store.IdentityFromProto(c.stagedRunsc.Identity)
			c.mu.Unlock()
			if err != nil {
				c.setState(stateFailed, err)
				return
			}
			if err := c.readyRouting(r, c.wantRouting); err != nil {
				c.setState(stateFailed, err)
				return
			}
			if err := c.readyEgress(r); err != nil {
				c.setState(stateFailed, err)
				return
			}
			kids, err := runscChildren(r, runscID, c.rsChild.Identity())
			if err != nil {
				c.setState(stateFailed, err)
				return
			}
			if err := c.recordSandbox(participant.Committed, store.CommittedSlot(c.rsChild.Identity()), store.CommittedSlot(runscID), &c.container,
				store.CommittedSlot(kids[0]), store.CommittedSlot(kids[1])); err != nil {
				c.setState(stateFailed, err)
				return
			}
			if err := c.commitNetwork(r); err != nil {
				c.setState(stateFailed, err)
				return
			}
			if err := c.recordPublication(); err != nil {
				c.setState(stateFailed, err)
				return
			}
			// The running sandbox holds the credential mount: unlink the
			// key's source and forget it (spec §3.2).
			os.Remove(filepath.Join(c.credentialDir(), "sandbox.key"))
			c.anchor.DropSandboxKey()
			c.setState(stateRunning, nil)
			c.timing.Mark("Domain published")
			failpoint.Hit("lazaret-hc:published")
		case m.GetFailure() != nil:
			f := m.GetFailure()
			c.setState(stateFailed, errdefs.Mark(errors.New(f.Message), errdefs.FromCategory(f.Category)))
		case m.GetStopped() != nil:
			c.mu.Lock()
			c.anchorsUnmounted = m.GetStopped().GetAnchorsUnmounted()
			c.mu.Unlock()
			close(c.stopped)
			return
		default:
			c.log.Error("unexpected supervisor message", "msg", m.String())
		}
	}
}

// runscChildren validates the runsc sandbox and gofer identities RS proved
// and reported in SandboxReady: both present, of this boot, and distinct
// from each other, from the attached runsc client and from RS. They are
// recorded with the Committed client and are the only authority by which
// any later Lazaret process acts on them.
func runscChildren(r *lv1.SandboxReady, client, rs pidfs.Identity) ([2]pidfs.Identity, error) {
	var out [2]pidfs.Identity
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return out, err
	}
	seen := map[pidfs.Authority]string{client.Authority: "the attached runsc client", rs.Authority: "the runtime supervisor"}
	for i, p := range []*lv1.PidfsProcessIdentityV1{r.GetRunscSandbox(), r.GetRunscGofer()} {
		name := [2]string{"runsc sandbox", "runsc gofer"}[i]
		if p == nil {
			return out, errdefs.New(errdefs.ErrRefused, "SandboxReady names no %s identity", name)
		}
		id, err := store.IdentityFromProto(p)
		if err != nil {
			return out, fmt.Errorf("SandboxReady %s: %w", name, err)
		}
		if err := participant.ValidIdentity(id); err != nil || id.BootID != boot {
			return out, errdefs.New(errdefs.ErrRefused, "SandboxReady %s identity %s is not a current pidfs identity of this boot (%v)", name, id, err)
		}
		if other, dup := seen[id.Authority]; dup {
			return out, errdefs.New(errdefs.ErrRefused, "SandboxReady %s identity %s is %s's", name, id, other)
		}
		seen[id.Authority] = name
		out[i] = id
	}
	return out, nil
}

func bytesEqualIdentity(a, b *lv1.PidfsProcessIdentityV1) bool {
	return a != nil && b != nil && string(a.BootId) == string(b.BootId) && a.PidfsStDev == b.PidfsStDev && a.PidfsStIno == b.PidfsStIno && a.HostPid == b.HostPid
}

// commitStaged validates RS's StagedProcessOwnership and acknowledges it
// with an exact echo (CausalChildAcquisitionV1 step 6).
func (c *coordinator) commitStaged(s *lv1.StagedProcessOwnership) error {
	sig := s.Signature
	unsigned := proto.Clone(s).(*lv1.StagedProcessOwnership)
	unsigned.Signature = nil
	payload, err := fdpass.SigningPayload(unsigned)
	if err != nil {
		return err
	}
	if err := trust.Verify(c.rsCred.Claims.PublicKey, trust.RecordStagedProcessOwnership, payload, sig); err != nil {
		return errdefs.New(errdefs.ErrRefused, "StagedProcessOwnership is not signed by this generation's runtime supervisor credential")
	}
	if s.DomainId == string(c.paths.ID) && s.Generation == c.generation && s.CoordinatorId == c.coordinator && s.Slot == "git_routing" && c.wantRouting {
		boot, err := pidfs.CurrentBootID()
		if err != nil {
			return err
		}
		if s.Identity == nil || string(s.Identity.BootId) != string(boot[:]) {
			return errdefs.New(errdefs.ErrRefused, "staged git_routing identity is not of this boot")
		}
		return c.commitStagedRouting(s)
	}
	if s.DomainId == string(c.paths.ID) && s.Generation == c.generation && s.CoordinatorId == c.coordinator && s.Slot == "egress_proxy" && c.allowlist() {
		return c.commitStagedEgress(s)
	}
	if s.DomainId != string(c.paths.ID) || s.Generation != c.generation || s.CoordinatorId != c.coordinator || s.Slot != "attached_runsc" {
		return errdefs.New(errdefs.ErrRefused, "staged ownership for %s/%d/%s/%s does not match this generation", s.DomainId, s.Generation, s.CoordinatorId, s.Slot)
	}
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return err
	}
	if s.Identity == nil || string(s.Identity.BootId) != string(boot[:]) {
		return errdefs.New(errdefs.ErrRefused, "staged attached runsc identity is not of this boot")
	}
	c.mu.Lock()
	dup := c.stagedRunsc != nil
	if !dup {
		c.stagedRunsc = s
	}
	c.mu.Unlock()
	if dup {
		return errdefs.New(errdefs.ErrRefused, "duplicate staged attached runsc ownership")
	}
	runscID, err := store.IdentityFromProto(s.Identity)
	if err != nil {
		return err
	}
	if err := c.recordSandbox(participant.Intent, store.CommittedSlot(c.rsChild.Identity()), store.StagedSlot(runscID), nil); err != nil {
		return err
	}
	failpoint.Hit("lazaret-hc:staged-recorded")
	// The sandbox joins RS's network namespace at boot: runsc runs only once
	// the connectivity helper has configured it.
	waitStart := time.Now()
	if err := <-c.net.helperReady; err != nil {
		return err
	}
	// What the connectivity helper adds to the start-up's critical path.
	c.log.Info("connectivity helper awaited", "helper_wait", time.Since(waitStart))
	// The Network Sidecar role is ready (the helper configured RS's
	// network namespace): recorded before the acknowledgement that lets
	// RS arm the causal edge and release runsc.
	c.mu.Lock()
	c.emit("StartSidecar", c.dom())
	c.mt.sidecar = true
	c.mu.Unlock()
	ack := &lv1.ProcessOwnershipCommitAck{DomainId: s.DomainId, Generation: s.Generation, CoordinatorId: s.CoordinatorId, Slot: s.Slot, Identity: s.Identity}
	ackPayload, err := fdpass.SigningPayload(ack)
	if err != nil {
		return err
	}
	if ack.Signature, err = c.anchor.SignAsCoordinator(trust.RecordProcessOwnershipCommitAck, ackPayload); err != nil {
		return err
	}
	return c.rsChan.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Ack{Ack: ack}})
}

// sandboxStart verifies RS's network and mount namespaces independently,
// through RS's retained pidfd, and builds the sandbox spec that joins it by path.
func (c *coordinator) sandboxStart(hello *lv1.SupervisorHello) (*lv1.StartSandbox, error) {
	h := c.rsChild.Handle()
	dev, ino, err := h.NetNamespace()
	if err != nil {
		return nil, fmt.Errorf("read runtime supervisor netns through its pidfd: %w", err)
	}
	if hello.NetNamespace.GetDev() != dev || hello.NetNamespace.GetIno() != ino {
		return nil, errdefs.New(errdefs.ErrRefused, "runtime supervisor reports netns %d:%d but its pidfd shows %d:%d", hello.NetNamespace.GetDev(), hello.NetNamespace.GetIno(), dev, ino)
	}
	if err := verifyMountNamespace(h, hello.GetMountNamespace()); err != nil {
		return nil, err
	}
	// RS is our unreaped child, so its pid cannot be reused: the path below
	// names the namespace just verified. Check it anyway.
	nsPath := fmt.Sprintf("/proc/%d/ns/net", h.PID())
	pdev, pino, err := pidfs.NamespaceOfPath(nsPath)
	if err != nil || pdev != dev || pino != ino {
		return nil, errdefs.New(errdefs.ErrRefused, "netns path %s does not name the verified namespace", nsPath)
	}
	if host, hostIno, err := pidfs.NamespaceOfPath("/proc/self/ns/net"); err == nil && host == dev && hostIno == ino {
		return nil, errdefs.New(errdefs.ErrRefused, "runtime supervisor is in the host network namespace")
	}
	netns := &lv1.NamespaceIdentity{Dev: dev, Ino: ino}
	if !proto.Equal(netns, c.net.netns) {
		return nil, errdefs.New(errdefs.ErrRefused, "runtime supervisor netns %d:%d is not the one the connectivity helper joins (%v)", dev, ino, c.net.netns)
	}
	sandboxNS, err := c.sandboxNetNS(hello, nsPath, netns)
	if err != nil {
		return nil, err
	}
	probe, err := netprobe.EncodeSpec(c.net.probe)
	if err != nil {
		return nil, err
	}
	digest := c.policy.Digest()
	anchors, err := c.stateAnchors()
	if err != nil {
		return nil, err
	}
	profilePaths, err := c.profilePaths()
	if err != nil {
		return nil, err
	}
	sb := ocispec.Sandbox{
		Anchors:       anchors,
		ProfilePaths:  profilePaths,
		Hostname:      c.hostname,
		Workspace:     c.ws,
		ControlSource: c.paths.ControlMountSource(),
		NetNSPath:     sandboxNS,
		Env:           c.baseEnv,
		Volumes:       c.volumes(),
		ControlFiles:  c.credentialMounts(),
		EtcFiles:      c.net.etcFiles,

		// Escalation Mailbox (escalation.go).
		MailboxRequests: c.esc.hostReq, MailboxResults: c.esc.hostRes,
	}
	routing, err := c.gitSentryStart(&sb)
	if err != nil {
		return nil, err
	}
	c.wantRouting = routing != nil
	initArgs := []string{ocispec.InitPath, ocispec.InitArg, "--netprobe=" + probe}
	if u := c.profile.SessionUser(); !u.IsRoot() {
		// The init creates the profile's user if the image lacks it.
		initArgs = append(initArgs, fmt.Sprintf("--user=%s:%d:%d", u.Name, u.UID, u.GID))
	}
	c.limits = c.profile.Limits.Effective(hostMemTotal("/proc/meminfo"))
	c.log.Info("resource limits", "memory_bytes", c.limits.Memory, "processes", c.limits.Processes, "open_files", c.limits.OpenFiles)
	spec, err := ocispec.Spec(sb, ocispec.Process{Args: initArgs, Env: c.baseEnv, Cwd: "/", Rlimits: c.rlimits()})
	if err != nil {
		return nil, err
	}
	js, err := ocispec.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return &lv1.StartSandbox{
		DomainId: string(c.paths.ID), Generation: c.generation, CoordinatorId: c.coordinator, ContainerId: c.container,
		ImageRef: c.image, StorageRoot: c.paths.StorageRoot, BundleDir: c.paths.BundleDir(), OciSpecJson: js,
		RunscPath: c.rt.Path, RunscFlags: c.rt.GlobalFlags(), NetNamespace: netns,
		PolicyDigest: digest[:], TapDevice: slirp.Tap, TapGateway: c.net.addr.Gateway.String(), GitRouting: routing,
		Profile: c.profile.Name, ProfilePaths: c.profile.ProfilePaths, SessionUid: c.profile.SessionUser().UID, SessionGid: c.profile.SessionUser().GID,
		MemoryLimitBytes: c.limits.Memory, Egress: c.egressSpec(),
	}, nil
}

// derivePolicy derives the generation's network policy from trusted
// configuration only (FR-19): the built-in defaults and the host's DNS
// resolvers. The sandbox never supplies policy.
func (c *coordinator) derivePolicy() (netpolicy.Policy, error) {
	in := netpolicy.Input{Resolvers: c.profile.Network.DNS}
	if len(in.Resolvers) == 0 {
		resolvers, err := hostResolvers("/etc/resolv.conf")
		if err != nil {
			c.log.Warn("no usable DNS resolvers from the host", "err", err)
		}
		in.Resolvers = resolvers
	}
	src := "profile " + c.profile.Name
	if c.profile.Network.Mode == config.ModeAllowlist {
		// The egress proxy admits the host names and resolves them
		// itself, at each request: nothing is pinned.
		in.Mode, in.Hosts, in.Ask = netpolicy.ModeAllowlist, c.profile.Network.HostRules(c.profile.Name), c.profile.Network.Ask
	} else {
		in.Allow = append(in.Allow, c.resolveAllowHosts(in.Resolvers)...)
	}
	for _, a := range c.profile.Network.Allow {
		in.Allow = append(in.Allow, netpolicy.Rule{Prefix: a, Source: src + " network.allow"})
	}
	for _, d := range c.profile.Network.Deny {
		in.Deny = append(in.Deny, netpolicy.Rule{Prefix: d, Source: src + " network.deny"})
	}
	p, err := netpolicy.Derive(in)
	if err != nil {
		return p, errdefs.Mark(err, errdefs.ErrInvalid)
	}
	return p, nil
}

// hostResolvers reads the IPv4 nameservers of a resolv.conf, skipping
// loopback ones (a host-local stub is not reachable from the sandbox).
func hostResolvers(file string) ([]netip.Addr, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.Is4() || a.IsLoopback() {
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// teardown stops everything of the generation and releases the Domain.
func (c *coordinator) teardown() {
	c.mu.Lock()
	c.requestTeardownLocked()
	c.st = stateStopping
	sessions := make([]*session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	rsChild := c.rsChild
	c.mu.Unlock()
	c.log.Info("tearing down")
	failpoint.Hit("lazaret-hc:teardown-begin")
	// Withdraw publication before dropping keys.
	if c.listener != nil {
		c.withdraw()
		c.listener.Close()
	}
	for _, s := range sessions {
		s.kill()
	}
	// Let sessions deliver their last frame (exit status or error).
	done := make(chan struct{})
	go func() { c.sessionWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(drainTimeout + closeGrace):
	}
	if c.store != nil {
		if err := c.withdrawPublication(c.generation, "teardown: publication file removed, listener closed"); err != nil {
			c.log.Error("record publication withdrawal", "err", err)
		}
		if err := c.releaseSandbox(); err != nil {
			c.log.Error("record sandbox release intent", "err", err)
		}
		if err := c.releaseAnchorIntent(); err != nil {
			c.log.Error("record state anchor release intent", "err", err)
		}
		failpoint.Hit("lazaret-hc:anchor-release-intent")
		c.releaseNetworkRecords()
		if err := c.releaseRouting(); err != nil {
			c.log.Error("record git_routing release intent", "err", err)
		}
	}
	if rsChild != nil {
		if c.rsChan != nil {
			c.rsChan.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Stop{Stop: &lv1.StopSandbox{}}})
		}
		select {
		case <-rsChild.Done():
		case <-time.After(rsStopWait):
			c.log.Error("runtime supervisor did not stop: SIGKILL through its pidfd")
			c.mu.Lock()
			c.mt.rsKilled = true
			c.mu.Unlock()
			rsChild.Signal(unix.SIGKILL)
			<-rsChild.Done()
		}
		if modeltrace.On() {
			// SupervisorStopped is read by superviseMessages, which may
			// lag behind the exit.
			stopped := false
			select {
			case <-c.stopped:
				stopped = true
			case <-time.After(time.Second):
			}
			st, _ := rsChild.Status()
			c.mtSupervisorGone(st, stopped)
		}
	}
	failpoint.Hit("lazaret-hc:rs-stopped")
	c.stopHelper()
	c.esc.close() // every host process of the generation killed and reaped
	if c.lifetimeW != nil {
		c.lifetimeW.Close()
	}
	if c.anchor != nil {
		c.anchor.Destroy()
	}
	if c.store != nil {
		c.finishNetwork(rsChild)
		c.finishLower(rsChild)
		c.finishSandbox(rsChild)
		c.store.Close()
	}
	c.cleanupRuntime() // after finishSandbox: it removes runsc state only once its processes are proven gone
	c.endSticky()
	c.mtFinish()
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
	c.removeRuntimeExceptRunscState()
}

// setEnv sets k=v in env, replacing an existing k.
func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// volumes are the profile's developer-configured volumes.
func (c *coordinator) volumes() []ocispec.Volume {
	var out []ocispec.Volume
	for _, v := range c.profile.Volumes {
		out = append(out, ocispec.Volume{Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	return out
}

// CredentialsDir is the fixed credential path inside the sandbox.
const CredentialsDir = ocispec.CredentialsDir

// credentialDir holds the host sources of the sandbox credential mounts.
func (c *coordinator) credentialDir() string { return filepath.Join(c.paths.RuntimeDir, "credentials") }

// sandboxCredentialFiles are the files of the credential mount.
var sandboxCredentialFiles = []string{"sandbox.key", "sandbox.cred", "manifest", "coordinator.cred"}

// writeSandboxCredentials writes the sandbox's credential files (the only
// private key that enters the sandbox is its request-signing key) and the
// empty mount points for them in the control mount source. Each file is its
// own read-only bind mount, so the key stays readable inside after HC
// unlinks its source.
func (c *coordinator) writeSandboxCredentials() error {
	files, err := c.anchor.SandboxFiles()
	if err != nil {
		return err
	}
	points := filepath.Join(c.paths.ControlMountSource(), "credentials")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{c.credentialDir(), 0o700}, {points, controlDirMode}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	// Readable by every guest user: the sandbox is one principal (a
	// request is bound to its session by the Session Request Capability),
	// and a non-root session user must sign its requests too. Host side
	// the sources stay in the private credential directory.
	for _, name := range sandboxCredentialFiles {
		if err := writeFileMode(filepath.Join(c.credentialDir(), name), files[name], 0o644); err != nil {
			return err
		}
		if err := writeFileMode(filepath.Join(points, name), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// controlDirMode is the mode of the control mount's directories.
const controlDirMode = 0o755

// writeFileMode writes data to path with exactly mode (not masked).
func writeFileMode(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

func (c *coordinator) credentialMounts() []ocispec.ControlFile {
	var out []ocispec.ControlFile
	for _, name := range sandboxCredentialFiles {
		out = append(out, ocispec.ControlFile{Source: filepath.Join(c.credentialDir(), name), Target: CredentialsDir + "/" + name})
	}
	return out
}

// statusDocument is the Domain's state for `lazaret status`.
func (c *coordinator) statusDocument() *lv1.DomainStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	states := map[state]string{stateStarting: "starting", stateRunning: "running", stateFailed: "failed", stateStopping: "stopping"}
	doc := &lv1.DomainStatus{
		DomainId: proto.String(string(c.paths.ID)), Profile: proto.String(c.prof), Workspace: proto.String(c.ws),
		Generation: proto.Uint64(c.generation), State: proto.String(states[c.st]), CoordinatorId: proto.String(c.coordinator),
		ConfigurationFingerprint: proto.String(c.profile.Fingerprint()), ContainerId: proto.String(c.container),
		Image: proto.String(c.image),
	}
	for id := range c.sessions {
		doc.Sessions = append(doc.Sessions, &lv1.SessionStatus{SessionId: proto.String(id)})
	}
	if c.failErr != nil && c.st == stateFailed {
		doc.Failure = proto.String(c.failErr.Error())
	}
	if c.linger > 0 {
		doc.LingerMs = proto.Int64(c.linger.Milliseconds())
	}
	if !c.lingerUntil.IsZero() && c.st == stateRunning {
		doc.LingerLeftMs = proto.Int64(max(time.Until(c.lingerUntil).Milliseconds(), 0))
	}
	for _, r := range c.retained {
		doc.Retained = append(doc.Retained, &lv1.RetainedRecord{Generation: proto.Uint64(r.Generation), Record: proto.String(r.Record), Reason: proto.String(r.Reason)})
	}
	if c.store != nil {
		parts := map[string]string{}
		c.store.View(func(tx *store.Tx) error {
			ps, err := tx.Participants(c.generation)
			for _, p := range ps {
				parts[string(p.Role)] = string(p.Phase)
			}
			return err
		})
		doc.Participants = parts
	}
	if c.rsChild != nil {
		doc.RuntimeSupervisor = proto.String(c.rsChild.Identity().String())
	}
	if c.stagedRunsc != nil {
		doc.AttachedRunscPid = proto.Uint32(c.stagedRunsc.Identity.GetHostPid())
	}
	if c.sandboxReady != nil {
		doc.PreparedArtifact = proto.String(c.sandboxReady.PreparedArtifactId)
		doc.Routes = c.sandboxReady.ObservedRoutes
	}
	d := c.policy.Digest()
	doc.NetworkPolicyDigest = proto.String(fmt.Sprintf("%x", d[:]))
	doc.Network = c.networkStatusLocked()
	return doc
}

// rsCredentialFile is what the Runtime Supervisor receives in its sealed
// credential memfd: its own signing key and the coordinator's verification
// key.
type rsCredentialFile struct {
	KeySeed              []byte `json:"key_seed"`
	CoordinatorPublicKey []byte `json:"coordinator_public_key"`
}
