package rs

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/failpoint"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/mountns"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/netsetup"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/prepared"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/timing"
	"github.com/lazaret/lazaret/pkg/trust"
)

// Timeouts (variables so tests and failpoints can shorten them).
var (
	readyTimeout = 120 * time.Second
	stopGrace    = 5 * time.Second
)

// Main runs the Runtime Supervisor with its command-line arguments and
// returns the process exit status.
func Main(args []string) int {
	fs := flag.NewFlagSet("lazaret-rs", flag.ContinueOnError)
	channelFD := fs.Int("channel-fd", -1, "inherited SOCK_SEQPACKET channel to the Host Coordinator")
	lifetimeFD := fs.Int("lifetime-fd", -1, "inherited read end of the Host Coordinator lifetime pipe")
	lockFD := fs.Int("lock-fd", -1, "inherited Domain lock descriptor (held until exit)")
	policyFD := fs.Int("policy-fd", -1, "inherited write-sealed memfd with the derived network policy")
	credentialFD := fs.Int("credential-fd", -1, "inherited write-sealed memfd with RS's protocol signing key and the coordinator's verification key")
	logLevel := fs.String("log-level", "info", "debug|info|warn|error")
	rolesExe := fs.String("roles-exe", "", "the lazaret-hc executable to run the egress role and the wrappers from (default: this binary)")
	gitRoutingExe := fs.String("git-routing-exe", "", "the lazaret-gitroute executable to run the Git-routing daemon from (default: this binary)")
	preparerExe := fs.String("preparer-exe", "", "the lazaret-cli executable to run the preparer of a prepared lower from")
	firstSessionFD := fs.Int("first-session-fd", -1, "inherited socket of the Host Coordinator's first session, for the sandbox's init (ocispec.FirstSessionFD)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rec := timing.FromEnv("rs", os.Getenv, time.Now)
	rec.Mark("supervisor started")
	if err := modeltrace.Start("rs", os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "lazaret-rs:", err)
	}
	var lvl slog.Level
	lvl.UnmarshalText([]byte(*logLevel))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("role", "rs", "pid", os.Getpid())
	if *channelFD < 3 || *lifetimeFD < 3 {
		fmt.Fprintln(os.Stderr, "lazaret-rs is started by lazaret-hc, not by hand (missing --channel-fd/--lifetime-fd)")
		return 2
	}
	_ = lockFD // held open (not close-on-exec'd away) so the Domain lock outlives HC until RS is gone
	ch, err := fdpass.FromFD(*channelFD)
	if err != nil {
		log.Error("adopt channel", "err", err)
		return 1
	}
	unix.CloseOnExec(*lifetimeFD)
	if *lockFD >= 0 {
		unix.CloseOnExec(*lockFD)
	}
	exe, err := os.Executable()
	if err != nil {
		log.Error("find own executable", "err", err)
		return 1
	}
	roles := rolesExecutable("roles-exe", *rolesExe, exe, log)
	routingExe := rolesExecutable("git-routing-exe", *gitRoutingExe, exe, log)
	// The wrappers (one per acquired child: the Git-routing daemon, runsc,
	// the egress proxy) run from the smallest binary hosting the role,
	// lazaret-gitroute, else from lazaret-hc, which is smaller than this
	// one: a wrapper's start is mostly its package initialisation, on the
	// start's CPU-bound path. The failpoint stages keep naming this process
	// (lazaret-rs) whichever binary the wrappers run from.
	wrapperExe := roles
	if routingExe != exe {
		wrapperExe = routingExe
	}
	broker, err := proc.NewBrokerWrapped(log, wrapperExe, filepath.Base(exe))
	if err != nil {
		log.Error("start broker", "err", err)
		return 1
	}
	if *policyFD < 3 {
		fmt.Fprintln(os.Stderr, "lazaret-rs: missing --policy-fd")
		return 2
	}
	cred, err := readCredential(*credentialFD)
	if err != nil {
		log.Error("protocol credential", "err", err)
		return 2
	}
	s := &supervisor{timing: rec, rolesExe: roles, gitRoutingExe: routingExe, preparerExe: *preparerExe, policyFD: *policyFD, cred: cred, log: log, ch: ch, broker: broker, acks: make(chan *lv1.ProcessOwnershipCommitAck, 1), leases: make(chan *lv1.LeaseRecorded, 1), helperUp: make(chan struct{}), stop: make(chan struct{}), hcGone: make(chan struct{})}
	s.mt.domain, s.mt.gen = cred.domain, cred.generation
	if *firstSessionFD >= 3 {
		unix.CloseOnExec(*firstSessionFD)
		s.firstSession = os.NewFile(uintptr(*firstSessionFD), "first-session")
	}
	go s.watchLifetime(os.NewFile(uintptr(*lifetimeFD), "lifetime"))
	code := s.run()
	s.mtLeaseLoss()
	return code
}

// rolesExecutable is the binary RS runs hidden roles from: path, which the
// coordinator named with the --option flag, when RS can exec it here, in
// its own user and mount namespaces (an absolute path to a regular
// executable file), else fallback, which hosts the same roles (RS's own
// executable).
func rolesExecutable(option, path, fallback string, log *slog.Logger) string {
	if path == "" {
		return fallback
	}
	var st unix.Stat_t
	var why string
	switch err := unix.Stat(path, &st); {
	case !filepath.IsAbs(path):
		why = "not an absolute path"
	case err != nil:
		why = "not reachable: " + err.Error()
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		why = "not a regular file"
	default:
		if err := unix.Access(path, unix.X_OK); err != nil {
			why = "not executable: " + err.Error()
			break
		}
		return path
	}
	if fallback == "" { // the preparer: this binary does not host it
		log.Warn("roles executable unusable in the supervisor's namespaces; its roles are unavailable", "option", option, "exe", path, "reason", why)
	} else {
		log.Warn("roles executable unusable in the supervisor's namespaces; running its roles from the fallback", "option", option, "exe", path, "fallback", fallback, "reason", why)
	}
	return fallback
}

// mtSteps is what this supervisor recorded in the model trace.
type mtSteps struct {
	domain  string
	gen     uint64
	mounted bool // MountStateAnchor
	sandbox bool // ArmRuntimeCausalEdge, StartSandbox (the coordinator recorded StartSidecar before its ack)
}

func (s *supervisor) emit(action string) { modeltrace.Emit(s.mt.domain, s.mt.gen, action, s.mt.domain) }

// plEmit records PreparedLower step action of this supervisor's generation.
func (s *supervisor) plEmit(action string) {
	modeltrace.EmitGeneration(s.mt.domain, s.mt.gen, s.art.ID, action)
}

// released reports whether the coordinator asked RS to stop (after it
// recorded state_anchor ReleaseIntent) or is gone (lease-loss teardown).
func (s *supervisor) released() bool {
	select {
	case <-s.stop:
		return true
	case <-s.hcGone:
		return true
	default:
		return false
	}
}

// mtLeaseLoss records, as RS exits, the coordinator's loss RS observed
// (lifetime EOF or channel loss without a stop request) and the ordered
// lease-loss teardown RS ran. They are recorded at exit, not as each step
// is taken: no other process records for the Domain meanwhile (its
// coordinator is gone and the next one needs the Domain lock RS holds
// until it exits), so the order is the same.
func (s *supervisor) mtLeaseLoss() {
	if !modeltrace.On() {
		return
	}
	select {
	case <-s.stop:
		return
	default:
	}
	select {
	case <-s.hcGone:
	default:
		return
	}
	s.emit("HardLoseHostCoordinator")
	if s.mt.sandbox {
		s.emit("LeaseTeardownStopSandbox")
		s.emit("LeaseTeardownStopSidecar")
	}
	if s.mt.mounted {
		s.emit("LeaseTeardownUnmountStateAnchor")
	}
	s.emit("LeaseTeardownSupervisorExit")
	// PreparedLower: the anchors mounted are gone (unmounted by the
	// teardown, or with RS's mount namespace as it exits); the catalog
	// lease and the Domain records stay for the next coordinator.
	if s.mt.mounted {
		s.plEmit("LeaseLossUnmount")
	}
	s.plEmit("LeaseLossExit")
}

type supervisor struct {
	timing   *timing.Recorder // nil unless LAZARET_DEBUG=timing
	mt       mtSteps
	rolesExe string // the binary the egress role and the wrappers run from (rolesExecutable)
	// gitRoutingExe is the binary the Git-routing daemon runs from: the
	// front binary (lazaret) when HC names it, the smallest that hosts the
	// role, as the daemon's start is on the start-up's critical path.
	gitRoutingExe string
	// preparerExe is lazaret-cli as the coordinator named it
	// (--preparer-exe), whose preparer role prepares a lower; runPreparer
	// checks it, as only a start that must prepare needs it.
	preparerExe string
	policyFD    int
	// firstSession is the coordinator's first-session socket for the
	// sandbox's init (ocispec.FirstSessionFD), passed to the attached
	// runsc; nil without one.
	firstSession *os.File
	cred         credential
	policy       netpolicy.Policy // verified against StartSandbox's digest (checkPolicy)
	routes       []netsetup.Route
	tapAddr      netip.Prefix
	probe        string // the init's network probe report line
	log          *slog.Logger
	ch           *fdpass.Channel
	broker       *proc.Broker
	start        *lv1.StartSandbox
	spec         *specs.Spec // start's OCI spec, decoded once by launch (read-only)
	rt           runsc.Runtime
	art          prepared.Artifact
	anchors      []anchor.MountIdentity // mounted State Anchors, in mount order
	hostBinds    []mountns.FileBind     // host-side binds made (host_binds), in order
	given        []string               // ignored directories bound and given for the generation (GivenFile)
	giving       chan error             // the session user's share of them, given while runsc boots (awaitGiving)
	lowerUse     *prepared.Use          // usage hold on the prepared lower (gc never reclaims it)
	held         *heldLower             // the hold begun before StartSandbox (joinLower)
	purged       chan struct{}          // closed when reclaimed artifacts are deleted
	stopPurge    context.CancelFunc     // stops that deletion (awaitPurge)
	routing      *proc.Child            // Git-routing daemon, when the profile isolates ignored paths
	routingRules chan error             // the daemon's ignore rules complete (awaitRoutingRules)
	kids         *runscChildren         // the attached runsc's sandbox and gofer, once proven
	routed       *lv1.GitRoutingReady
	acks         chan *lv1.ProcessOwnershipCommitAck
	leases       chan *lv1.LeaseRecorded // HC recorded the prepared-lower lease
	// helperUp is closed when HC reports the connectivity helper's tap
	// configured; policyInstalled then delivers installPolicy's outcome.
	helperUp        chan struct{}
	policyInstalled chan error
	// guardW writes the Git-routing daemon's guard updates (updateGuard).
	guardMu   sync.Mutex
	guardW    *os.File
	unmounted []uint64               // anchors verified and unmounted at teardown
	mountNS   *lv1.NamespaceIdentity // RS's mount namespace (hello)
	stop      chan struct{}          // HC asked to stop
	hcGone    chan struct{}          // lifetime EOF or channel loss: lease-loss teardown
	// profileHold is the profile's shared lock while its profile paths
	// are bound (package profilestate).
	profileHold *os.File
	// sandboxNS and egress: the allowlist network mode's sandbox network
	// namespace and egress proxy (egress.go); nil in the deny mode.
	sandboxNS     *netsetup.SandboxNamespace
	egress        *egressProxy
	asks          *egressProxy // the proxy whose asks HC answers (answerAsk)
	sandboxRoutes []netsetup.Route
}

func (s *supervisor) watchLifetime(f *os.File) {
	io.Copy(io.Discard, f) // returns at EOF: every HC copy of the write end is closed
	s.log.Warn("host coordinator lifetime pipe closed: lease-loss teardown")
	closeOnce(s.hcGone)
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

func (s *supervisor) send(m *lv1.SupervisorMessage) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.ch.Send(ctx, m)
}

func (s *supervisor) fail(err error) int {
	s.log.Error("supervisor failed", "err", err)
	s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: errdefs.Category(err), Message: err.Error()}}})
	return 1
}

func nsIdentity(path string) (*lv1.NamespaceIdentity, error) {
	dev, ino, err := pidfs.NamespaceOfPath(path)
	if err != nil {
		return nil, err
	}
	return &lv1.NamespaceIdentity{Dev: dev, Ino: ino}, nil
}

// mountNSIdentity is RS's own mount namespace with its never-reused ID,
// which HC records for the State Anchor's mount-absence proof: its nsfs
// inode alone may later name another Domain's new namespace.
func mountNSIdentity(log *slog.Logger) (*lv1.NamespaceIdentity, error) {
	dev, ino, id, err := pidfs.MountNamespaceOfPath("/proc/self/ns/mnt")
	if err != nil {
		return nil, err
	}
	ns := &lv1.NamespaceIdentity{Dev: dev, Ino: ino}
	if id != 0 {
		ns.MntnsId = &id
	} else {
		log.Debug("mount namespace has no unique ID: identified by nsfs dev/ino only", "err", pidfs.ErrNoNamespaceID)
	}
	return ns, nil
}

func (s *supervisor) run() int {
	hello := &lv1.SupervisorHello{}
	var err error
	for path, dst := range map[string]**lv1.NamespaceIdentity{"/proc/self/ns/net": &hello.NetNamespace, "/proc/self/ns/user": &hello.UserNamespace} {
		if *dst, err = nsIdentity(path); err != nil {
			return s.fail(err)
		}
	}
	if hello.MountNamespace, err = mountNSIdentity(s.log); err != nil {
		return s.fail(err)
	}
	mode, err := peekPolicyMode(s.policyFD)
	if err != nil {
		return s.fail(err)
	}
	if mode == netpolicy.ModeAllowlist {
		// The sandbox gets its own network namespace, whose only way out
		// is the egress proxy here (egress.go).
		if s.sandboxNS, err = netsetup.NewSandboxNamespace(); err != nil {
			return s.fail(err)
		}
		dev, ino := s.sandboxNS.Identity()
		hello.SandboxNetNamespace = &lv1.NamespaceIdentity{Dev: dev, Ino: ino}
		hello.SandboxNetnsTid = uint32(s.sandboxNS.TID())
	}
	if err := s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Hello{Hello: hello}}); err != nil {
		s.log.Error("send hello", "err", err)
		return 1
	}
	s.mountNS = hello.MountNamespace
	failpoint.Hit("lazaret-rs:hello-sent")
	// The prepared lower is looked up and held while the coordinator
	// verifies the hello (its progress, if it prepares, may follow the
	// hello in any phase).
	if in := s.cred.lower; in.storageRoot != "" {
		s.holdLowerEarly(in)
	}
	var first lv1.CoordinatorMessage
	if err := s.ch.Recv(context.Background(), &first); err != nil {
		s.log.Error("receive start", "err", err)
		return 1
	}
	s.timing.Mark("StartSandbox received")
	s.start = first.GetStart()
	if s.start == nil {
		return s.fail(errdefs.New(errdefs.ErrCorrupt, "first coordinator message is not StartSandbox"))
	}
	s.log = s.log.With("domain_id", s.start.DomainId, "generation", s.start.Generation)
	if !proto.Equal(s.start.NetNamespace, hello.NetNamespace) {
		return s.fail(errdefs.New(errdefs.ErrRefused, "coordinator verified netns %v but RS is in %v", s.start.NetNamespace, hello.NetNamespace))
	}
	if !runsc.ValidContainerID(s.start.ContainerId) {
		return s.fail(errdefs.New(errdefs.ErrInvalid, "bad container id %q", s.start.ContainerId))
	}
	s.rt = runsc.Runtime{Path: s.start.RunscPath, Root: runscRootFromFlags(s.start.RunscFlags)}
	go s.receive()

	sandbox, stdin, err := s.launch()
	if err != nil {
		s.stopGitRouting()
		s.stopEgress()
		return s.fail(err)
	}
	// The sandbox is ready: from here on RS only watches it.
	idlemem.SettleSoon(s.log)
	code := s.serve(sandbox, stdin)
	return code
}

func runscRootFromFlags(flags []string) string {
	for _, f := range flags {
		if strings.HasPrefix(f, "--root=") {
			return strings.TrimPrefix(f, "--root=")
		}
	}
	return ""
}

// receive dispatches coordinator messages after StartSandbox.
func (s *supervisor) receive() {
	for {
		var m lv1.CoordinatorMessage
		if err := s.ch.Recv(context.Background(), &m); err != nil {
			if !errors.Is(err, fdpass.ErrClosed) {
				s.log.Error("coordinator channel", "err", err)
			}
			closeOnce(s.hcGone)
			return
		}
		switch {
		case m.GetAck() != nil:
			select {
			case s.acks <- m.GetAck():
			default:
				s.log.Error("unexpected ProcessOwnershipCommitAck: refusing it")
			}
		case m.GetLeaseRecorded() != nil:
			select {
			case s.leases <- m.GetLeaseRecorded():
			default:
				s.log.Error("unexpected LeaseRecorded: refusing it")
			}
		case m.GetStop() != nil:
			closeOnce(s.stop)
		case m.GetNetworkDecision() != nil:
			s.answerAsk(m.GetNetworkDecision())
		case m.GetGitGuardUpdate() != nil:
			s.updateGuard(m.GetGitGuardUpdate())
		case m.GetHelperReady() != nil:
			closeOnce(s.helperUp)
		default:
			s.log.Error("unexpected coordinator message", "msg", m.String())
		}
	}
}

func (s *supervisor) progress(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Info(msg)
	s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Progress{Progress: &lv1.Progress{Message: msg}}})
}

type progressWriter struct{ s *supervisor }

func (w progressWriter) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			w.s.progress("%s", line)
		}
	}
	return len(b), nil
}

// launch prepares the filesystem and network and starts the attached runsc.
func (s *supervisor) launch() (*proc.Child, *os.File, error) {
	st := s.start
	var sp specs.Spec
	if err := json.Unmarshal(st.OciSpecJson, &sp); err != nil {
		return nil, nil, errdefs.Mark(fmt.Errorf("the coordinator's OCI spec: %w", err), errdefs.ErrCorrupt)
	}
	s.spec = &sp
	if err := mountns.MakePrivate(); err != nil {
		return nil, nil, err
	}
	// The Git-routing daemon needs neither the lower nor the anchors: it
	// starts now and mounts the workspace while the lower is held, the
	// lease recorded and the State Anchors mounted; it is joined before
	// runsc starts. Its staged ownership is the only one acknowledged
	// meanwhile (runsc and the egress proxy are staged after the join).
	joinRouting := func() error { return nil }
	if st.GitRouting != nil {
		done := make(chan struct{})
		var (
			child  *proc.Child
			routed *lv1.GitRoutingReady
			rerr   error
		)
		go func() {
			defer close(done)
			child, routed, rerr = s.startGitRouting()
			if rerr == nil {
				s.timing.Mark("Git routing mounted")
			}
		}()
		joined := false
		joinRouting = func() error {
			if !joined {
				joined = true
				<-done
				s.routing, s.routed = child, routed
			}
			return rerr
		}
		// Every failure below leaves the daemon recorded in s.routing,
		// so that the caller's stopGitRouting stops it.
		defer joinRouting()
	}
	art, named, err := s.joinLower(st)
	if err != nil {
		return nil, nil, err
	}
	s.art = art
	s.timing.Mark("prepared lower held")
	failpoint.Hit("lazaret-rs:prepared")
	// What neither mounts nor needs the lease runs while the coordinator
	// records it: the profile paths' directories and lock, the rootfs
	// mount point and the State Anchors' reset trash.
	rootfs := filepath.Join(st.BundleDir, "rootfs")
	unmounted := make(chan error, 1)
	go func() { unmounted <- s.beforeMounts(rootfs) }()
	if !named {
		if err := s.requestLease(); err != nil {
			<-unmounted
			return nil, nil, err
		}
	}
	// The network's checks need neither the Git routing nor the lower: they
	// run while the coordinator records the lease, off the start's path.
	if err := s.checkNetwork(); err != nil {
		<-unmounted
		return nil, nil, err
	}
	s.installPolicyOnHelper()
	if err := s.awaitLease(); err != nil {
		<-unmounted
		return nil, nil, err
	}
	s.timing.Mark("lease recorded by the coordinator")
	if err := <-unmounted; err != nil {
		return nil, nil, err
	}
	if err := s.mountRoot(art, rootfs); err != nil {
		return nil, nil, err
	}
	failpoint.Hit("lazaret-rs:rootfs-mounted")
	s.timing.Mark("root mounted")
	if err := s.mountAnchors(rootfs); err != nil {
		return nil, nil, err
	}
	s.timing.Mark("State Anchors mounted")
	if err := s.makeHostBinds(); err != nil {
		return nil, nil, err
	}
	if err := joinRouting(); err != nil {
		return nil, nil, err
	}
	config, err := s.configJSON()
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(st.BundleDir, "config.json"), config, 0o600); err != nil {
		return nil, nil, err
	}
	if s.sandboxNS != nil {
		if err := s.startEgress(); err != nil {
			return nil, nil, err
		}
		if s.sandboxRoutes, err = s.readSandboxRoutes(); err != nil {
			return nil, nil, err
		}
		s.timing.Mark("egress proxy listening")
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	// runsc's standard error is the init's too, which a guest process can
	// write (initStream): it reaches the Domain log through this pipe, as
	// values of records, never raw.
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	var initReady atomic.Bool
	go s.initStream(errR, "stderr", &initReady, nil)
	files := []*os.File{inR, outW, errW}
	var passed []int
	if s.firstSession != nil {
		files = append(files, s.firstSession) // descriptor 3 of runsc
		passed = append(passed, ocispec.FirstSessionFD)
	}
	argv := s.rt.Run(st.BundleDir, st.ContainerId, passed...)
	s.timing.Mark("starting runsc")
	child, err := s.broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot:     "attached_runsc",
		ExecStop: true, // no wrapper re-exec of lazaret-rs on the start-up path
		Target:   proc.Command{Path: argv[0], Args: argv, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, Dir: st.BundleDir, Files: files, FDTable: runsc.RunFDTable},
		// HC acknowledges runsc's staged ownership only once the
		// connectivity helper has configured the tap; the policy's routes
		// go onto it before the barrier releases runsc (gVisor imports
		// routes only at boot).
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			if err := s.stageWithCoordinator(ctx, id); err != nil {
				return err
			}
			// The acknowledgement came after the coordinator recorded
			// the sidecar ready: the client's parent-death edge to RS is
			// armed at the barrier, and runsc is released below.
			s.emit("ArmRuntimeCausalEdge")
			s.emit("StartSandbox")
			s.mt.sandbox = true
			s.timing.Mark("runsc ownership acknowledged (helper ready)")
			// The coordinator announced the helper before this
			// acknowledgement: the routes are in, or going in.
			if err := s.awaitPolicy(); err != nil {
				return err
			}
			s.timing.Mark("runsc released")
			return nil
		},
	})
	inR.Close()
	outW.Close()
	errW.Close()
	if s.firstSession != nil {
		s.firstSession.Close() // runsc holds it now
	}
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, nil, err
	}
	ready := make(chan error, 1)
	// SR-5: the network-administration capability is dropped once runsc
	// has imported the network namespace — the import precedes the start
	// of the container's init, so the init's first line proves it — and
	// before publication. The drop runs while the init probes the
	// network, off the readiness path; dropped carries its outcome.
	dropped := make(chan error, 1)
	dropping := false
	drop := func() {
		if !dropping {
			dropping = true
			go func() { dropped <- netsetup.DropNetAdmin() }()
		}
	}
	go func() {
		// The init's protocol is read until its ready line; what follows
		// is untrusted (initStream).
		s.initStream(outR, "stdout", &initReady, func(line string) bool {
			switch msg, failed := strings.CutPrefix(line, ocispec.InitErrorPrefix); {
			case line == ocispec.ReadyLine:
				drop() // begun already unless the init skipped its first line
				initReady.Store(true)
				ready <- nil
			case line == ocispec.InitStartedLine:
				s.timing.Mark("sandbox init started")
				drop()
			case failed:
				s.log.Error("sandbox init failed", "err", msg)
				ready <- errdefs.New(errdefs.ErrInvalid, "the sandbox's init cannot start it: %s", msg)
			case strings.HasPrefix(line, netprobe.LinePrefix) && s.probe == "":
				s.timing.Mark("sandbox init: network probe reported")
				s.probe = line // read before ReadyLine is sent: no race
			default:
				return false
			}
			return true
		})
		if !initReady.Load() {
			ready <- errdefs.New(errdefs.ErrUnavailable, "the sandbox exited before its init was ready")
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			s.teardown(child, inW)
			return nil, nil, err
		}
	case <-time.After(readyTimeout):
		s.teardown(child, inW)
		return nil, nil, errdefs.New(errdefs.ErrUnavailable, "the sandbox did not become ready within %s", readyTimeout)
	case <-s.hcGone:
		s.teardown(child, inW)
		return nil, nil, errdefs.New(errdefs.ErrUnavailable, "host coordinator gone during start")
	}
	// SR-5: runsc has imported the network namespace at boot; the
	// network-administration capability is dropped irreversibly (begun at
	// the init's first line) before publication.
	if err := <-dropped; err != nil {
		s.teardown(child, inW)
		return nil, nil, err
	}
	failpoint.Hit("lazaret-rs:runsc-ready")
	// The sandbox and gofer exist once the init runs: prove them children
	// of this exact client now, while it is our unreaped child, and report
	// their identities — the only handles by which anything may stop them.
	s.timing.Mark("runsc ready (sandbox init running)")
	kids, err := s.identifyRunscChildren(child)
	if err != nil {
		s.teardown(child, inW)
		return nil, nil, err
	}
	s.kids = kids
	// The sandbox is ready only with the Git-routing daemon's complete
	// ignore rules (awaitRoutingRules).
	if err := s.awaitRoutingRules(); err != nil {
		s.teardown(child, inW)
		return nil, nil, err
	}
	if failpoint.Armed("lazaret-rs:kill-runsc-after-ready") {
		child.Signal(unix.SIGKILL) // simulates an attached runsc crash
	}
	if failpoint.Armed("lazaret-rs:kill-git-routing-after-ready") && s.routing != nil {
		s.routing.Signal(unix.SIGKILL) // simulates a Git-routing daemon crash
	}
	// Readiness before publication: the session user has what is inside
	// the bound ignored directories.
	if err := s.awaitGiving(); err != nil {
		s.teardown(child, inW)
		return nil, nil, err
	}
	id := child.Identity()
	s.timing.Mark("sandbox and gofer identified")
	if err := s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Ready{Ready: &lv1.SandboxReady{
		PreparedArtifactId: art.ID, ImageRef: st.ImageRef, ManifestDigest: art.Source.ManifestDigest, AttachedRunsc: identityProto(id),
		RunscSandbox: identityProto(kids.sandbox.Identity()), RunscGofer: identityProto(kids.gofer.Identity()),
		PolicyDigest: st.PolicyDigest, ObservedRoutes: routeStrings(s.routes),
		NetworkProbeReport: s.probe, ObservedTapAddress: s.tapAddr.String(), GitRouting: s.routed,
		EgressProxy: s.egressIdentity(), ObservedSandboxRoutes: routeStrings(s.sandboxRoutes),
	}}}); err != nil {
		s.teardown(child, inW)
		return nil, nil, err
	}
	return child, inW, nil
}

// checkPolicy reads the derived policy from the sealed memfd, checks it
// against the digest HC sent and the StartSandbox tap fields, and disables
// IPv6 in RS's network namespace.
// checkNetwork brings up RS's loopback and checks the network policy and
// the egress proxy's spec against StartSandbox (before routes are installed
// and runsc starts).
func (s *supervisor) checkNetwork() error {
	if err := netsetup.LoopbackUp(); err != nil {
		return err
	}
	if err := s.checkPolicy(); err != nil {
		return err
	}
	if err := s.checkEgress(); err != nil {
		return err
	}
	s.timing.Mark("network checked (policy, loopback)")
	return nil
}

func (s *supervisor) checkPolicy() error {
	raw, err := fdpass.ReadSealedMemfd(s.policyFD, netpolicy.MaxCanonicalSize)
	if err != nil {
		return err
	}
	p, err := netpolicy.Decode(raw)
	if err != nil {
		return errdefs.Mark(err, errdefs.ErrCorrupt)
	}
	if d := p.Digest(); string(d[:]) != string(s.start.PolicyDigest) {
		return errdefs.New(errdefs.ErrRefused, "network policy digest %x does not match the coordinator's %x", d[:], s.start.PolicyDigest)
	}
	if err := netsetup.DisableIPv6(); err != nil {
		return err
	}
	if s.start.TapDevice == "" {
		return errdefs.New(errdefs.ErrRefused, "StartSandbox names no connectivity helper tap device")
	}
	if gw, err := netip.ParseAddr(s.start.TapGateway); err != nil || !gw.Is4() {
		return errdefs.New(errdefs.ErrInvalid, "StartSandbox tap gateway %q is not an IPv4 address", s.start.TapGateway)
	}
	s.policy = p
	return nil
}

// installPolicyOnHelper installs the checked policy (installPolicy) as
// soon as the coordinator announces the connectivity helper's tap
// configured, while the lease, the State Anchors and the Git routing are
// prepared; awaitPolicy joins it before runsc is released.
func (s *supervisor) installPolicyOnHelper() {
	s.policyInstalled = make(chan error, 1)
	go func() {
		select {
		case <-s.helperUp:
		case <-s.stop:
			s.policyInstalled <- errdefs.New(errdefs.ErrUnavailable, "stop requested before the connectivity helper was ready")
			return
		case <-s.hcGone:
			s.policyInstalled <- errdefs.New(errdefs.ErrUnavailable, "host coordinator gone before the connectivity helper was ready")
			return
		}
		err := s.installPolicy()
		if err == nil {
			s.timing.Mark("policy routes installed")
		}
		s.policyInstalled <- err
	}()
}

// awaitPolicy returns installPolicyOnHelper's outcome.
func (s *supervisor) awaitPolicy() error {
	if s.policyInstalled == nil {
		return errdefs.New(errdefs.ErrInternal, "the policy's routes were never begun")
	}
	return <-s.policyInstalled
}

// installPolicy installs the checked policy on the connectivity helper's
// tap (configured by then: the coordinator announced the helper's ready
// signal) before runsc boots, and keeps the observed routes as evidence.
func (s *supervisor) installPolicy() error {
	gw := netip.MustParseAddr(s.start.TapGateway) // checked in checkPolicy
	tapAddr, err := netsetup.InterfaceAddress(s.start.TapDevice)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("connectivity helper device: %w", err), errdefs.ErrUnavailable)
	}
	s.tapAddr = tapAddr
	p := s.policy
	exclude := []netip.Prefix{tapAddr.Masked()}
	if s.sandboxNS != nil {
		exclude = append(exclude, netpolicy.ProxyPrefix) // the egress proxy's veth
	}
	routes, err := netsetup.InstallPolicy(p, s.start.TapDevice, gw, p.FailFast(exclude...))
	if err != nil {
		return err
	}
	if err := netsetup.VerifyDenyRoutes(p, routes); err != nil {
		return errdefs.Mark(err, errdefs.ErrRefused)
	}
	s.routes = routes
	return nil
}

// stageWithCoordinator is acquisition step 6 for an RS-launched child: send
// the exact staged tuple and wait for HC's exact echo.
func (s *supervisor) stageWithCoordinator(ctx context.Context, id pidfs.Identity) error {
	return s.stageSlot(ctx, "attached_runsc", id)
}

// stageSlot is stageWithCoordinator for any RS-acquired slot.
func (s *supervisor) stageSlot(ctx context.Context, slot string, id pidfs.Identity) error {
	staged := &lv1.StagedProcessOwnership{DomainId: s.start.DomainId, Generation: s.start.Generation, CoordinatorId: s.start.CoordinatorId, Slot: slot, Identity: identityProto(id)}
	payload, err := fdpass.SigningPayload(staged)
	if err != nil {
		return err
	}
	staged.Signature = trust.Sign(s.cred.key, trust.RecordStagedProcessOwnership, payload)
	if err := s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Staged{Staged: staged}}); err != nil {
		return err
	}
	select {
	case ack := <-s.acks:
		want := &lv1.ProcessOwnershipCommitAck{DomainId: staged.DomainId, Generation: staged.Generation, CoordinatorId: staged.CoordinatorId, Slot: staged.Slot, Identity: staged.Identity}
		sig := ack.Signature
		ack.Signature = nil
		ackPayload, err := fdpass.SigningPayload(ack)
		if err != nil {
			return err
		}
		if err := trust.Verify(s.cred.coordinator, trust.RecordProcessOwnershipCommitAck, ackPayload, sig); err != nil {
			return errdefs.New(errdefs.ErrRefused, "ProcessOwnershipCommitAck is not signed by the Session Coordinator")
		}
		if !proto.Equal(ack, want) {
			return errdefs.New(errdefs.ErrRefused, "ProcessOwnershipCommitAck does not echo the staged ownership exactly")
		}
		return nil
	case <-s.hcGone:
		return errdefs.New(errdefs.ErrUnavailable, "host coordinator gone before acknowledging staged ownership")
	case <-s.stop:
		// HC failed the generation (e.g. the connectivity helper did not
		// start) while the child waited at its barrier: it never runs.
		return errdefs.New(errdefs.ErrUnavailable, "stop requested before the staged ownership was acknowledged")
	case <-time.After(30 * time.Second):
		return errdefs.New(errdefs.ErrUnavailable, "no ProcessOwnershipCommitAck within 30s")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// IdentityProto encodes a pidfs identity.
func identityProto(id pidfs.Identity) *lv1.PidfsProcessIdentityV1 {
	return &lv1.PidfsProcessIdentityV1{BootId: id.BootID[:], PidfsStDev: id.Dev, PidfsStIno: id.Ino, HostPid: id.HostPID, StartTimeTicks: id.StartTimeTicks}
}

func (s *supervisor) serve(sandbox *proc.Child, stdin *os.File) int {
	var memHit <-chan memoryExceeded // nil: no limit, never ready
	if lim := s.start.GetMemoryLimitBytes(); lim > 0 && s.kids != nil {
		memDone := make(chan struct{})
		defer close(memDone)
		memHit = s.watchMemory(s.kids, lim, memDone)
	}
	overLimit := func(e memoryExceeded) {
		s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "unavailable", Message: e.Error()}}})
	}
	select {
	case e := <-memHit:
		overLimit(e)
	case <-s.stop:
		s.log.Info("stop requested")
		failpoint.Hit("lazaret-rs:stop-requested")
	case <-s.hcGone:
	case <-s.egressDone():
		s.log.Error("egress proxy exited unexpectedly: tearing down")
		s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "unavailable", Message: "the egress proxy stopped unexpectedly"}}})
	case <-s.routingDone():
		s.log.Error("git-routing daemon exited unexpectedly: tearing down")
		s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "unavailable", Message: "the Git-routing daemon stopped unexpectedly"}}})
	case <-sandbox.Done():
		select {
		case e := <-memHit: // the watchdog's kill, seen from the client's side
			overLimit(e)
		default:
			st, _ := sandbox.Status()
			s.log.Error("attached runsc exited unexpectedly", "status", st.String())
			s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: &lv1.SupervisorFailure{Category: "unavailable", Message: "the sandbox stopped unexpectedly (" + st.String() + ")"}}})
		}
	}
	s.teardown(sandbox, stdin, true)
	s.awaitPurge()
	s.send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Stopped{Stopped: &lv1.SupervisorStopped{AnchorsUnmounted: s.unmounted}}})
	return 0
}

// teardown stops the sandbox: EOF on the init's stdin ends the container's
// init and with it every guest process, and the attached client exits.
// Failing that, the sandbox and gofer are SIGKILLed through the pidfds RS
// proved them by, then the client through its own. runsc's state is
// removed only once all three are proven gone; no runsc command signals
// anything (`runsc kill --all` and `runsc delete` SIGKILL the state file's
// numeric pids).
//
// The State Anchors are unmounted only once the coordinator asked RS to
// stop (having recorded state_anchor ReleaseIntent first: the release
// ordering) or is gone (lease-loss teardown). await says RS has reported
// its failure and waits for that; otherwise (a start-up failure RS
// reports after this teardown) the anchors are left to the end of RS's
// mount namespace as RS exits, which the coordinator proves.
func (s *supervisor) teardown(sandbox *proc.Child, stdin *os.File, await ...bool) {
	stdin.Close()
	s.endRoutingWatches()
	id := s.start.ContainerId
	wait := func(d time.Duration) bool {
		select {
		case <-sandbox.Done():
			return true
		case <-time.After(d):
			return false
		}
	}
	if !wait(stopGrace) {
		if s.kids == nil {
			// Torn down before readiness: prove them now, while the client
			// is still our unreaped child.
			if kids, err := s.identifyRunscChildren(sandbox); err == nil {
				s.kids = kids
			} else {
				s.log.Warn("runsc sandbox and gofer not identified: only the client is stopped", "err", err)
			}
		}
		s.log.Warn("sandbox did not stop on init EOF: SIGKILL of the runsc sandbox and gofer through their pidfds")
		s.killRunscChildren(s.kids)
		if !wait(stopGrace) {
			s.log.Warn("attached runsc still running: SIGKILL through its pidfd")
			sandbox.Signal(unix.SIGKILL)
			<-sandbox.Done()
		}
	}
	failpoint.Hit("lazaret-rs:sandbox-stopped")
	s.stopEgress() // nothing can reach it any more
	if err := s.runscChildrenGone(s.kids); err != nil {
		s.log.Error("runsc sandbox or gofer not proven gone: runsc state kept for the coordinator's check", "container", id, "err", err)
	} else {
		// Nothing of the sandbox reads the profile paths or writes the
		// bound ignored directories any more.
		s.releaseProfilePaths()
		s.returnIgnoredBinds()
		if err := runsc.RemoveState(s.rt.Root, id); err != nil {
			s.log.Warn("remove runsc state", "container", id, "err", err)
		}
	}
	s.kids.close()
	failpoint.Hit("lazaret-rs:deleted")
	if len(await) > 0 && await[0] {
		select {
		case <-s.stop:
		case <-s.hcGone:
		}
	}
	if s.released() {
		s.unmountAnchors()
	} else if len(s.anchors) > 0 {
		s.log.Warn("State Anchors left mounted until RS exits: the coordinator has not recorded their release intent", "count", len(s.anchors))
	}
	rootfs := filepath.Join(s.start.BundleDir, "rootfs")
	if err := mountns.Unmount(rootfs); err != nil && !errors.Is(err, unix.EINVAL) {
		s.log.Warn("unmount rootfs", "err", err)
	}
	s.removeSkeleton()
	s.stopGitRouting()
}

func routeStrings(rs []netsetup.Route) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// credential is RS's protocol signing key and the coordinator's
// verification key, from the sealed memfd HC passed.
type credential struct {
	key         ed25519.PrivateKey
	coordinator ed25519.PublicKey
	// domain and generation name the generation this supervisor serves,
	// known before StartSandbox (the model trace records by them even
	// when the coordinator is lost before it).
	domain     string
	generation uint64
	// lower names the prepared lower to hold before StartSandbox.
	lower lowerInputs
}

func readCredential(fd int) (credential, error) {
	if fd < 3 {
		return credential{}, errdefs.New(errdefs.ErrInvalid, "missing --credential-fd")
	}
	raw, err := fdpass.ReadSealedMemfd(fd, 4096)
	if err != nil {
		return credential{}, err
	}
	f, err := trust.ParseSupervisorCredentialFile(raw)
	if err != nil {
		return credential{}, err
	}
	return credential{key: ed25519.NewKeyFromSeed(f.KeySeed), coordinator: ed25519.PublicKey(f.CoordinatorPublicKey), domain: f.DomainID, generation: f.Generation,
		lower: lowerInputs{storageRoot: f.StorageRoot, imageRef: f.ImageRef, domainID: f.DomainID, generation: f.Generation}}, nil
}
