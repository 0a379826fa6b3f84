package hc

// Launching a generation's Runtime Supervisor and building the
// StartSandbox that answers its hello.

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hc/preparedlower"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/netprobe"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/profilestate"
	"github.com/lazaret/lazaret/pkg/slirp"
	"github.com/lazaret/lazaret/pkg/timing"
	"github.com/lazaret/lazaret/pkg/trust"
)

// startGeneration acquires the Runtime Supervisor and drives it to ready.
func (c *coordinator) startGeneration() {
	c.routing.StartSticky()
	if err := c.rsl.finish(c); err != nil {
		c.setState(stateFailed, err)
		return
	}
	// The connectivity helper starts while RS starts up: it needs only RS's
	// network namespace, which exists from the clone on (read through RS's
	// pidfd). StartSandbox waits only for the network's identity
	// (network.Service.Prepare); the helper's readiness gates the attached runsc
	// (commitStaged), so the prepared lower, State Anchors and Git routing
	// are set up while the helper starts.
	c.superviseMessages(c.net.Launch(c.rsChild))
}

// rsLaunch is the Runtime Supervisor's acquisition. It begins while the
// coordinator initialises (spawnSupervisor, from init): the clone into new
// namespaces, the wrapper's start and newuidmap/newgidmap run while the
// store opens, recovery runs and the generation is recorded. RS is held at
// its barrier, running none of its code, until init has created the
// generation's trust anchor and releases the stage: only then are its
// policy and credential written and its ownership recorded (the staged
// Intent precedes RS running, as before), while init completes.
type rsLaunch struct {
	release     chan struct{} // closed by releaseStage: stage and release RS
	releaseOnce sync.Once
	cancel      chan struct{} // closed by abort: the coordinator did not start
	done        chan struct{} // closed when the acquisition returned
	err         error
	// The channel and the lifetime pipe's write end, handed to the
	// coordinator by finish (or closed by abort).
	ch        *fdpass.Channel
	lifetimeW *os.File
}

// spawnSupervisor begins the acquisition of RS in the background.
func (c *coordinator) spawnSupervisor() *rsLaunch {
	l := &rsLaunch{release: make(chan struct{}), cancel: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.err = c.launchSupervisor(l)
	}()
	return l
}

// releaseStage lets the acquisition stage and release RS: init calls it
// once the trust anchor exists (RS's credential needs it, and the model's
// StartRuntimeSupervisor follows CreateTrustAnchor), while the rest of
// init (sandbox credentials, escalation mailbox, publication, control
// socket) proceeds.
func (l *rsLaunch) releaseStage() {
	l.releaseOnce.Do(func() { close(l.release) })
}

// finish releases the acquisition (if init has not) and waits for it; on
// return the coordinator holds RS (or the error).
func (l *rsLaunch) finish(c *coordinator) error {
	l.releaseStage()
	<-l.done
	c.rsChan, c.lifetimeW = l.ch, l.lifetimeW
	return l.err
}

// abort ends an acquisition the coordinator will not use (its start-up
// failed). Held at its barrier, the child ran nothing: the broker kills
// and reaps it. Already released, RS loses its channel and lifetime pipe
// and ends as when its coordinator dies (its records are recovered by the
// next coordinator); abort waits for it, bounded, then kills it.
func (l *rsLaunch) abort(c *coordinator) {
	if l == nil {
		return
	}
	close(l.cancel)
	<-l.done
	if l.ch != nil {
		l.ch.Close()
	}
	if l.lifetimeW != nil {
		l.lifetimeW.Close()
	}
	if l.err == nil && c.rsChild != nil {
		select {
		case <-c.rsChild.Done():
		case <-time.After(rsStopWait):
			c.rsChild.Signal(unix.SIGKILL)
			<-c.rsChild.Done()
		}
	}
}

// errNotStarted aborts an RS acquisition whose coordinator failed to start.
var errNotStarted = errors.New("the coordinator did not start")

func (c *coordinator) launchSupervisor(l *rsLaunch) error {
	host := hostcheck.Real(func(n string) (string, error) { return locate.Find(n, func(string) string { return "" }) })
	uids, gids, err := host.SubIDs()
	if err != nil {
		return err
	}
	newuidmap, newgidmap, err := host.IDMapTools()
	if err != nil {
		return err
	}
	// The policy and the credential are written and sealed at the stage
	// (they need the generation); RS reads them only once released, and
	// refuses a memfd that is not sealed.
	policyFile, err := fdpass.SealableMemfd("lazaret-network-policy")
	if err != nil {
		return err
	}
	defer policyFile.Close()
	credFile, err := fdpass.SealableMemfd("lazaret-rs-credential")
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
		ch.Close()
		peer.Close()
		return err
	}
	l.ch, l.lifetimeW = ch, lifeW
	uid, gid := os.Getuid(), os.Getgid()
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
			select {
			case <-l.release:
			case <-l.cancel:
				return errNotStarted
			}
			c.timing.Mark("starting the runtime supervisor")
			if err := c.writeSupervisorInputs(policyFile, credFile); err != nil {
				return err
			}
			c.log.Debug("staged ownership", "slot", "rs", "identity", id.String())
			if err := c.sb.SupervisorStaged(id); err != nil {
				return err
			}
			// RS exists (held at the barrier) under the lifetime lease.
			c.mu.Lock()
			c.emit("StartRuntimeSupervisor", c.dom())
			c.mt.rs = true
			c.lower.SupervisorSpawned()
			c.mu.Unlock()
			return nil
		},
	})
	peer.Close()
	lifeR.Close()
	if err != nil {
		// A failure before the stage (e.g. newuidmap) is reported once the
		// coordinator released the acquisition, in the order it had when
		// the acquisition began there.
		select {
		case <-l.release:
		case <-l.cancel:
			// The coordinator never started: nothing of the generation
			// was recorded for this child.
			return err
		}
		// An acquisition that failed after staging killed and reaped RS
		// itself (the broker's abort): the coordinator terminated it.
		c.mu.Lock()
		c.mt.rsKilled = true
		c.mu.Unlock()
		c.mtSupervisorGone(pidfs.ExitStatus{Signal: unix.SIGKILL}, false)
		return fmt.Errorf("start runtime supervisor: %w", err)
	}
	c.timing.Mark("runtime supervisor started (id maps written)")
	c.mu.Lock()
	c.rsChild = child
	c.mu.Unlock()
	c.failOnUnexpectedExit(child, "the runtime supervisor exited unexpectedly")
	return nil
}

// writeSupervisorInputs derives the network policy and issues RS's
// protocol credential, and seals each into the memfd RS inherited.
func (c *coordinator) writeSupervisorInputs(policyFile, credFile *os.File) error {
	policy, err := c.net.DerivePolicy()
	if err != nil {
		return err
	}
	if err := fdpass.FillAndSeal(policyFile, policy.Canonical()); err != nil {
		return err
	}
	// RS signs its ownership messages with its own protocol credential and
	// verifies HC's with the coordinator's public key.
	rsPub, rsKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		return err
	}
	defer clear(rsKey)
	if c.rsCred, err = c.anchor.IssueCredential(trust.RoleRuntimeSupervisor, randomID(), rsPub); err != nil {
		return err
	}
	credJSON, _ := json.Marshal(rsCredentialFile{KeySeed: rsKey.Seed(), CoordinatorPublicKey: c.anchor.CoordinatorCredential().Claims.PublicKey,
		DomainID: c.dom(), Generation: c.generation, StorageRoot: c.paths.StorageRoot, ImageRef: c.image})
	return fdpass.FillAndSeal(credFile, credJSON)
}

// supervisorEnv is the Runtime Supervisor's whole environment. It is fixed
// at the clone, before the generation is recorded: the generation reaches
// RS in its credential.
func (c *coordinator) supervisorEnv() []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.Getenv("HOME")}
	if p := os.Getenv(timing.EnvFile); p != "" && c.timing != nil {
		env = append(env, timing.EnvFile+"="+p)
	}
	if modeltrace.On() {
		env = append(env, modeltrace.Environ()...)
	}
	return env
}

// failOnUnexpectedExit fails the generation (which tears it down) when
// child exits while the Domain is neither stopping nor already failed.
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
	anchors, err := preparedlower.StateAnchors(c.paths.BundleDir(), c.profile.PersistentPaths)
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
		Hostname:      c.hostname,
		Workspace:     c.ws,
		ControlSource: c.paths.ControlMountSource(),
		NetNSPath:     sandboxNS,
		Env:           c.baseEnv,
		Volumes:       c.volumes(),
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
		DomainId: string(c.paths.ID), Generation: c.generation, CoordinatorId: c.coordinator, ContainerId: c.sb.Container(),
		ImageRef: c.image, StorageRoot: c.paths.StorageRoot, BundleDir: c.paths.BundleDir(), OciSpecJson: js,
		RunscPath: c.rt.Path, RunscFlags: c.rt.GlobalFlags(), NetNamespace: netns,
		PolicyDigest: digest[:], TapDevice: slirp.Tap, TapGateway: c.net.Gateway().String(), GitRouting: routing,
		Profile: c.profile.Name, ProfilePaths: c.profile.ProfilePaths, SessionUid: c.profile.SessionUser().UID, SessionGid: c.profile.SessionUser().GID,
		MemoryLimitBytes: c.limits.Memory, Egress: c.net.EgressSpec(),
	}, nil
}

// profilePaths are the profile's profile paths as binds of the profile's
// stored directories (package profilestate), shared by every Domain of the
// profile; RS creates a missing one before runsc starts.
func (c *coordinator) profilePaths() ([]ocispec.ProfilePath, error) {
	var out []ocispec.ProfilePath
	for _, g := range c.profile.ProfilePaths {
		src, err := profilestate.Source(c.paths.StorageRoot, c.profile.Name, g)
		if err != nil {
			return nil, err
		}
		out = append(out, ocispec.ProfilePath{Source: src, Target: g})
	}
	return out, nil
}
