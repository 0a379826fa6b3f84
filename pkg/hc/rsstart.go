package hc

// The coordinator's seam toward the Runtime Supervisor's driver (package
// supervisor), and building the StartSandbox that answers RS's hello.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/preparedlower"
	"github.com/lazaret/lazaret/pkg/hc/supervisor"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/profilestate"
	"github.com/lazaret/lazaret/pkg/slirp"
)

// startGeneration acquires the Runtime Supervisor and drives it to ready.
func (c *coordinator) startGeneration() {
	c.routing.StartSticky(c.stickyScan)
	if err := c.rs.Finish(); err != nil {
		c.setState(stateFailed, err)
		return
	}
	// The connectivity helper starts while RS starts up: it needs only RS's
	// network namespace, which exists from the clone on (read through RS's
	// pidfd). StartSandbox waits only for the network's identity
	// (network.Service.Prepare); the helper's readiness gates the attached runsc
	// (commitStaged), so the prepared lower, State Anchors and Git routing
	// are set up while the helper starts.
	c.superviseMessages(c.net.Launch(c.rs.Child()))
}

// wrapperExecutable is the binary the coordinator's broker runs its
// wrapper role from (the barrier of an acquisition that has no exec stop,
// package proc): the smallest Lazaret binary hosting the role, because a
// wrapper starts for every acquired child on the start's CPU-bound path
// (its package initialisation is most of its cost): lazaret-gitroute
// (~4 ms of package initialisation here), else the CLI's --front-exe, the
// lazaret front (~9 ms), when it is an absolute path to an executable
// regular file, else this binary (~15 ms), which hosts the same role.
func (c *coordinator) wrapperExecutable() string {
	if p := c.cfg.gitRouteExe; p != "" && filepath.IsAbs(p) && locate.IsExecutable(p) {
		return p
	}
	if p := c.cfg.frontExe; p != "" {
		if filepath.IsAbs(p) && locate.IsExecutable(p) {
			return p
		}
		c.log.Warn("--front-exe is not an absolute path to an executable regular file; the wrappers run from lazaret-hc", "front_exe", p)
	}
	if self, err := locate.Self(); err == nil {
		return self
	}
	exe, _ := os.Executable()
	return exe
}

// spawnSupervisor begins the Runtime Supervisor's acquisition (package
// supervisor): the clone, the wrapper's start and the id maps proceed
// while init opens the store, recovers and records the generation; RS is
// held at its barrier until init has created the trust anchor and
// releases the stage.
func (c *coordinator) spawnSupervisor(path, rolesExe, logLevel string) *supervisor.Driver {
	var first *os.File
	if c.first != nil {
		first = c.first.theirs
	}
	// RS's namespaces come from util-linux's unshare(1) when the host has
	// it (else RS is cloned into them): Go's spawn into a new user
	// namespace copies the coordinator's address space, and every page the
	// coordinator then writes while it opens its store and records the
	// generation faults (about 12 ms of a cold start's wall time here,
	// measured against the clone over 60 interleaved starts).
	return supervisor.Spawn(supervisor.Config{
		Log: c.log, Timing: c.timing, Broker: c.broker, Path: path, RolesExe: rolesExe, GitRoutingExe: c.cfg.gitRouteExe, PreparerExe: c.cfg.preparerExe, UnshareExe: proc.UnshareTool(), LogLevel: logLevel, Lock: c.lockFile,
		Inputs: c.supervisorInputs, Staged: c.supervisorStaged, FirstSession: first,
		// The broker killed and reaped the child: a staged RS was
		// terminated by the coordinator.
		Failed: func() { c.mtSupervisorGone(pidfs.ExitStatus{Signal: unix.SIGKILL}, false, true) },
		Watch: func(child *proc.Child) {
			c.failOnExitAfter(child, "the runtime supervisor exited unexpectedly", c.exchangeDone)
		},
	})
}

// supervisorInputs derives the network policy and names what RS's
// credential carries, at RS's stage.
func (c *coordinator) supervisorInputs() (supervisor.Inputs, error) {
	policy, err := c.net.DerivePolicy()
	if err != nil {
		return supervisor.Inputs{}, err
	}
	return supervisor.Inputs{Policy: policy.Canonical(), Anchor: c.anchor,
		DomainID: c.dom(), Generation: c.generation, StorageRoot: c.paths.StorageRoot, ImageRef: c.cfg.image}, nil
}

// supervisorStaged records RS's staged slot once the broker spawned it
// (held at the barrier, under the lifetime lease).
func (c *coordinator) supervisorStaged(id pidfs.Identity) error {
	if err := c.sb.SupervisorStaged(id); err != nil {
		return err
	}
	c.mu.Lock()
	c.mt.SupervisorStarted()
	c.lower.SupervisorSpawned()
	c.mu.Unlock()
	return nil
}

// failOnUnexpectedExit fails the generation (which tears it down) when
// child exits while the Domain is neither stopping nor already failed.
func (c *coordinator) failOnUnexpectedExit(child *proc.Child, what string) {
	c.failOnExitAfter(child, what, nil)
}

// exitReportWait bounds how long a child's exit waits for its last
// messages to be read (failOnExitAfter).
const exitReportWait = 2 * time.Second

// failOnExitAfter is failOnUnexpectedExit for a child that reports over a
// channel: once it exited, the exit counts only after read is closed (the
// channel read to its end), or exitReportWait.
func (c *coordinator) failOnExitAfter(child *proc.Child, what string, read <-chan struct{}) {
	go func() {
		<-child.Done()
		if read != nil {
			// What the child reported before it exited (RS's
			// SupervisorFailure names the cause and its remedy) is read
			// first; its exit only says that it ended.
			select {
			case <-read:
			case <-time.After(exitReportWait):
			}
		}
		st, _ := child.Status()
		c.mu.Lock()
		stopping := c.st == stateStopping || c.st == stateFailed
		c.mu.Unlock()
		if !stopping {
			c.setState(stateFailed, errdefs.New(errdefs.ErrUnavailable, "%s (%s); see %s", what, st, c.paths.Log()))
		}
	}()
}

// sandboxStart verifies RS's network and mount namespaces independently,
// through RS's retained pidfd, and builds the sandbox spec that joins it by path.
func (c *coordinator) sandboxStart(hello *lv1.SupervisorHello) (*lv1.StartSandbox, error) {
	if err := <-c.guestBinaries; err != nil {
		return nil, err
	}
	// The host's Git configuration, read since before the store opened:
	// the guest's Git identity and the daemon's guard. A configuration
	// host Git refuses fails the start here, as the Git Sentry's refusal
	// does.
	gitCfg, err := c.hostGit()
	if err != nil {
		return nil, err
	}
	c.routing.SetGuard(gitCfg.Paths)
	c.hostGitStart = gitCfg
	c.cfg.guest = newGuestEnv(c.cfg.workspace, c.cfg.profileName, c.paths.ID, c.cfg.profile, gitIdentity(gitCfg.Effective))
	h := c.rs.Child().Handle()
	dev, ino, err := h.NetNamespace()
	if err != nil {
		return nil, fmt.Errorf("read runtime supervisor netns through its pidfd: %w", err)
	}
	if hello.NetNamespace.GetDev() != dev || hello.NetNamespace.GetIno() != ino {
		return nil, errdefs.New(errdefs.ErrRefused, "runtime supervisor reports netns %d:%d but its pidfd shows %d:%d", hello.NetNamespace.GetDev(), hello.NetNamespace.GetIno(), dev, ino)
	}
	if err := preparedlower.VerifyMountNamespace(h, hello.GetMountNamespace()); err != nil {
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
	if helperNS := c.net.NetNS(); !proto.Equal(netns, helperNS) {
		return nil, errdefs.New(errdefs.ErrRefused, "runtime supervisor netns %d:%d is not the one the connectivity helper joins (%v)", dev, ino, helperNS)
	}
	sandboxNS, err := c.net.SandboxNetNS(hello, h.PID(), nsPath, netns)
	if err != nil {
		return nil, err
	}
	probe, err := netprobe.EncodeSpec(c.net.Probe())
	if err != nil {
		return nil, err
	}
	digest := c.net.Policy().Digest()
	anchors, err := preparedlower.StateAnchors(c.paths.BundleDir(), c.cfg.profile.PersistentPaths)
	if err != nil {
		return nil, err
	}
	profilePaths, err := c.profilePaths()
	if err != nil {
		return nil, err
	}
	mboxReq, mboxRes := c.esc.MailboxDirs()
	sb := ocispec.Sandbox{
		Anchors:       anchors,
		ProfilePaths:  profilePaths,
		Hostname:      c.cfg.guest.Hostname(),
		Workspace:     c.cfg.workspace,
		ControlSource: c.paths.ControlMountSource(),
		NetNSPath:     sandboxNS,
		Env:           c.cfg.guest.Base(),
		Volumes:       c.cfg.volumes(),
		ControlFiles:  c.credentialMounts(),
		EtcFiles:      c.net.EtcFiles(),

		// Escalation Mailbox (package escalation).
		MailboxRequests: mboxReq, MailboxResults: mboxRes,
	}
	routing, err := c.routing.Start(&sb)
	if err != nil {
		return nil, err
	}
	initArgs := []string{ocispec.InitPath, ocispec.InitArg, "--netprobe=" + probe}
	if u := c.cfg.profile.SessionUser(); !u.IsRoot() {
		// The init creates the profile's user if the image lacks it.
		initArgs = append(initArgs, fmt.Sprintf("--user=%s:%d:%d", u.Name, u.UID, u.GID))
	}
	c.cfg.limits = c.cfg.profile.Limits.Effective(hostMemTotal("/proc/meminfo"))
	c.log.Info("resource limits", "memory_bytes", c.cfg.limits.Memory, "processes", c.cfg.limits.Processes, "open_files", c.cfg.limits.OpenFiles)
	spec, err := ocispec.Spec(sb, ocispec.Process{Args: initArgs, Env: ocispec.InitEnv(c.cfg.guest.Base()), Cwd: "/", Rlimits: c.cfg.rlimits()})
	if err != nil {
		return nil, err
	}
	js, err := ocispec.Marshal(spec)
	if err != nil {
		return nil, err
	}
	return &lv1.StartSandbox{
		DomainId: string(c.paths.ID), Generation: c.generation, CoordinatorId: c.cfg.coordinatorID, ContainerId: c.sb.Container(),
		ImageRef: c.cfg.image, StorageRoot: c.paths.StorageRoot, BundleDir: c.paths.BundleDir(), OciSpecJson: js,
		RunscPath: c.sb.Runtime().Path, RunscFlags: c.sb.Runtime().GlobalFlags(), NetNamespace: netns,
		PolicyDigest: digest[:], TapDevice: slirp.Tap, TapGateway: c.net.Gateway().String(), GitRouting: routing,
		Profile: c.cfg.profile.Name, ProfilePaths: c.cfg.profile.ProfilePaths, SessionUid: c.cfg.profile.SessionUser().UID, SessionGid: c.cfg.profile.SessionUser().GID,
		MemoryLimitBytes: c.cfg.limits.Memory, Egress: c.net.EgressSpec(),
		ReusableArtifactId: c.reusableLower(),
		HostBinds:          ocispec.HostSideBinds(sb),
	}, nil
}

// profilePaths are the profile's profile paths as binds of the profile's
// stored directories (package profilestate), shared by every Domain of the
// profile; RS creates a missing one before runsc starts.
func (c *coordinator) profilePaths() ([]ocispec.ProfilePath, error) {
	var out []ocispec.ProfilePath
	for _, g := range c.cfg.profile.ProfilePaths {
		src, err := profilestate.Source(c.paths.StorageRoot, c.cfg.profile.Name, g)
		if err != nil {
			return nil, err
		}
		out = append(out, ocispec.ProfilePath{Source: src, Target: g})
	}
	return out, nil
}
