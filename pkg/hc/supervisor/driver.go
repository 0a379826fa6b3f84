package supervisor

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/locate"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/timing"
	"github.com/lazaret/lazaret/pkg/trust"
)

// DefaultStopWait bounds how long Stop and Abort wait for RS to exit
// before they kill it.
const DefaultStopWait = 30 * time.Second

// Config is what the driver needs from its coordinator.
type Config struct {
	Log    *slog.Logger
	Timing *timing.Recorder // nil unless LAZARET_DEBUG=timing
	// Broker acquires RS (CausalChildAcquisitionV1, slot "rs") and runs
	// newuidmap/newgidmap.
	Broker *proc.Broker
	// Path is the lazaret-rs executable; LogLevel its --log-level.
	Path     string
	LogLevel string
	// RolesExe, when set, is the lazaret-hc executable (locate.Self) that
	// RS runs its hidden egress role from (RS's --roles-exe), and its
	// wrappers when GitRoutingExe cannot run them: it starts faster than
	// lazaret-rs.
	RolesExe string
	// GitRoutingExe, when set, is the executable RS runs its Git-routing
	// daemon from (RS's --git-routing-exe; else lazaret-rs itself):
	// lazaret-gitroute, which links little besides that role and starts
	// faster than any other. The daemon's start is on the critical path of
	// every cold start (RS joins its mount just before runsc).
	GitRoutingExe string
	// PreparerExe, when set, is the lazaret-cli executable RS runs its
	// preparer role from (RS's --preparer-exe) when a start finds no
	// reusable prepared lower: lazaret-rs does not link the image library.
	PreparerExe string
	// UnshareExe, when set, is util-linux's unshare(1), which creates RS's
	// namespaces (proc.AcquireSpec.UnshareExe) so that spawning RS does not
	// copy the coordinator's address space.
	UnshareExe string
	// FirstSession, when set, is the sandbox init's end of the first
	// session's socket (ocispec.FirstSessionFD): RS inherits it as its
	// descriptor 8 (--first-session-fd) and passes it to the attached
	// runsc. The driver closes it once RS holds it.
	FirstSession *os.File
	// Lock is the Domain lock's descriptor: RS inherits it and holds the
	// lock until it exits.
	Lock *os.File
	// Env is RS's whole environment; nil: Environ(Timing).
	Env []string
	// MapIDs writes the uid and gid maps of RS's new user namespace while
	// it is held at its barrier; nil: the developer's full subordinate
	// ranges (SubordinateMapper), written by unshare(1) when it creates
	// the namespaces, else by newuidmap and newgidmap.
	MapIDs func(ctx context.Context, pid int) error
	// StopWait bounds the wait for RS's exit (DefaultStopWait if zero).
	StopWait time.Duration
	// Inputs returns, at the stage, what RS receives sealed: the network
	// policy and what its credential names. Called once the stage is
	// released (the Trust Anchor exists).
	Inputs func() (Inputs, error)
	// Staged records RS's staged ownership of the exact identity (and the
	// model's StartRuntimeSupervisor); RS is released only if it returns
	// nil.
	Staged func(id pidfs.Identity) error
	// Failed reports an acquisition that failed once released: the
	// broker killed and reaped the child (RS, if the stage had recorded
	// it: the coordinator terminated it).
	Failed func()
	// Watch is handed RS once acquired (the coordinator fails the
	// generation on its unexpected exit).
	Watch func(*proc.Child)
}

// Inputs is what RS receives in its sealed memfds.
type Inputs struct {
	// Policy is the derived network policy's canonical bytes.
	Policy []byte
	// Anchor issues RS's protocol credential and names the coordinator's
	// verification key.
	Anchor      *trust.Anchor
	DomainID    string
	Generation  uint64
	StorageRoot string
	ImageRef    string
}

// Driver is one generation's Runtime Supervisor: its acquisition, begun
// while the coordinator initialises, then the process, its channel and
// its lifetime pipe.
//
// The acquisition runs in the background from Spawn: the clone into new
// namespaces, the wrapper's start and the id maps proceed while the store
// opens, recovery runs and the generation is recorded. RS is held at its
// barrier, running none of its code, until ReleaseStage: only then are
// its policy and credential written and its ownership recorded (the
// staged Intent precedes RS running).
type Driver struct {
	cfg Config
	log *slog.Logger

	release     chan struct{} // closed by ReleaseStage: stage and release RS
	releaseOnce sync.Once
	cancel      chan struct{} // closed by Abort: the coordinator did not start
	done        chan struct{} // closed when the acquisition returned
	err         error
	// The channel and the lifetime pipe's write end, created by the
	// acquisition; the coordinator holds them from Finish on (Abort
	// closes them otherwise).
	ch        *fdpass.Channel
	lifetimeW *os.File

	mu      sync.Mutex
	child   *proc.Child       // RS, once acquired
	cred    *trust.Credential // RS's protocol credential, once staged
	held    bool              // Finish handed channel and pipe over
	killed  bool              // this driver SIGKILLed RS
	stopped chan struct{}     // closed by ReportStopped
	stopOne sync.Once
}

// errNotStarted aborts an RS acquisition whose coordinator failed to start.
var errNotStarted = errors.New("the coordinator did not start")

// Spawn begins the acquisition of RS in the background.
func Spawn(cfg Config) *Driver {
	d := newDriver(cfg)
	go func() {
		defer close(d.done)
		d.err = d.launch()
	}()
	return d
}

// OverChannel returns a Driver that holds ch, already connected to a
// Runtime Supervisor, and no process: the coordinator's exchange over a
// supervisor it did not launch (package supervisortest).
func OverChannel(ch *fdpass.Channel) *Driver {
	d := newDriver(Config{})
	d.ch, d.held = ch, true
	close(d.done)
	return d
}

func newDriver(cfg Config) *Driver {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.StopWait == 0 {
		cfg.StopWait = DefaultStopWait
	}
	return &Driver{cfg: cfg, log: cfg.Log, release: make(chan struct{}), cancel: make(chan struct{}),
		done: make(chan struct{}), stopped: make(chan struct{})}
}

// ReleaseStage lets the acquisition stage and release RS: the coordinator
// calls it once the Trust Anchor exists (RS's credential needs it, and the
// model's StartRuntimeSupervisor follows CreateTrustAnchor), while the rest
// of its start-up proceeds.
func (d *Driver) ReleaseStage() {
	d.releaseOnce.Do(func() { close(d.release) })
}

// Finish releases the acquisition (if not yet) and waits for it; on return
// the coordinator holds RS, its channel and its lifetime pipe (or the
// error).
func (d *Driver) Finish() error {
	d.ReleaseStage()
	<-d.done
	d.mu.Lock()
	d.held = true
	d.mu.Unlock()
	return d.err
}

// Abort ends an acquisition the coordinator will not use (its start-up
// failed). Held at its barrier, the child ran nothing: the broker kills
// and reaps it. Already released, RS loses its channel and lifetime pipe
// and ends as when its coordinator dies (its records are recovered by the
// next coordinator); Abort waits for it, bounded, then kills it.
func (d *Driver) Abort() {
	if d == nil {
		return
	}
	close(d.cancel)
	<-d.done
	if d.ch != nil {
		d.ch.Close()
	}
	if d.lifetimeW != nil {
		d.lifetimeW.Close()
	}
	if child := d.Child(); d.err == nil && child != nil {
		d.awaitExit(child)
	}
}

// Child returns RS once acquired, nil before (or on a nil Driver).
func (d *Driver) Child() *proc.Child {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.child
}

// Identity returns RS's pidfs identity (zero before it is acquired).
func (d *Driver) Identity() pidfs.Identity {
	if c := d.Child(); c != nil {
		return c.Identity()
	}
	return pidfs.Identity{}
}

// Killed reports whether this driver SIGKILLed RS (Stop or Abort past
// the bound, or the broker's abort of a staged acquisition).
func (d *Driver) Killed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.killed
}

func (d *Driver) launch() error {
	mapIDs := d.cfg.MapIDs
	var maps *proc.IDMaps // unshare(1) writes them (only the production maps)
	if mapIDs == nil {
		var err error
		if mapIDs, maps, err = SubordinateMapper(d.cfg.Broker); err != nil {
			return err
		}
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
	d.ch, d.lifetimeW = ch, lifeW
	env := d.cfg.Env
	if env == nil {
		env = Environ(d.cfg.Timing)
	}
	child, err := d.cfg.Broker.Acquire(context.Background(), proc.AcquireSpec{
		Slot: "rs",
		// lazaret-rs waits at the barrier in its own wrapper role: its
		// packages initialise while the coordinator opens its store, not
		// after the release.
		InPlace:    true,
		UnshareExe: d.cfg.UnshareExe,
		Maps:       maps,
		Target: proc.Command{
			Path: d.cfg.Path,
			Args: rsArgs(d.cfg),
			Env:  env,
			Dir:  "/",
			// stdin /dev/null; stdout/stderr to the coordinator log.
			Files:      rsFiles(d.cfg, peer, lifeR, policyFile, credFile),
			Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET,
		},
		Setup: func(ctx context.Context, h *pidfs.Handle) error { return mapIDs(ctx, h.PID()) },
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			select {
			case <-d.release:
			case <-d.cancel:
				return errNotStarted
			}
			d.cfg.Timing.Mark("starting the runtime supervisor")
			if err := d.writeInputs(policyFile, credFile); err != nil {
				return err
			}
			d.log.Debug("staged ownership", "slot", "rs", "identity", id.String())
			// RS exists (held at the barrier) under the lifetime lease.
			return d.cfg.Staged(id)
		},
	})
	peer.Close()
	lifeR.Close()
	if d.cfg.FirstSession != nil {
		d.cfg.FirstSession.Close() // RS holds it now
	}
	if err != nil {
		// A failure before the stage (e.g. newuidmap) is reported once the
		// coordinator released the acquisition, in the order it had when
		// the acquisition began there.
		select {
		case <-d.release:
		case <-d.cancel:
			// The coordinator never started: nothing of the generation
			// was recorded for this child.
			return err
		}
		// An acquisition that failed after staging killed and reaped RS
		// itself (the broker's abort): the coordinator terminated it.
		d.mu.Lock()
		d.killed = true
		d.mu.Unlock()
		if d.cfg.Failed != nil {
			d.cfg.Failed()
		}
		return fmt.Errorf("start runtime supervisor: %w", err)
	}
	d.cfg.Timing.Mark("runtime supervisor started (id maps written)")
	d.mu.Lock()
	d.child = child
	d.mu.Unlock()
	if d.cfg.Watch != nil {
		d.cfg.Watch(child)
	}
	return nil
}

// writeInputs seals the network policy and RS's protocol credential into
// the memfds RS inherited.
func (d *Driver) writeInputs(policyFile, credMemfd *os.File) error {
	in, err := d.cfg.Inputs()
	if err != nil {
		return err
	}
	// The generation exists from here on (RS was spawned before it was
	// recorded): the driver's later lines name it, as the coordinator's
	// do. Finish and Abort wait for this goroutine before any other use.
	d.log = d.log.With("generation", in.Generation)
	if err := fdpass.FillAndSeal(policyFile, in.Policy); err != nil {
		return err
	}
	// RS signs its ownership messages with its own protocol credential and
	// verifies HC's with the coordinator's public key.
	rsPub, rsKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		return err
	}
	defer clear(rsKey)
	componentID, err := trust.NewID(nil)
	if err != nil {
		return err
	}
	cred, err := in.Anchor.IssueCredential(trust.RoleRuntimeSupervisor, componentID, rsPub)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.cred = cred
	d.mu.Unlock()
	file := trust.SupervisorCredentialFile{KeySeed: rsKey.Seed(), CoordinatorPublicKey: in.Anchor.CoordinatorCredential().Claims.PublicKey,
		DomainID: in.DomainID, Generation: in.Generation, StorageRoot: in.StorageRoot, ImageRef: in.ImageRef}
	return fdpass.FillAndSeal(credMemfd, file.Marshal())
}

// Environ is the Runtime Supervisor's whole environment. It is fixed at
// the clone, before the generation is recorded: the generation reaches RS
// in its credential.
func Environ(rec *timing.Recorder) []string {
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.Getenv("HOME")}
	if p := os.Getenv(timing.EnvFile); p != "" && rec != nil {
		env = append(env, timing.EnvFile+"="+p)
	}
	if modeltrace.On() {
		env = append(env, modeltrace.Environ()...)
	}
	return env
}

// errNoChannel refuses a message before the coordinator holds the channel.
var errNoChannel = errdefs.New(errdefs.ErrUnavailable, "the runtime supervisor's channel is not held")

// rsFiles are RS's inherited descriptors, numbered as rsArgs names them.
func rsFiles(cfg Config, channel, lifetime, policy, cred *os.File) []*os.File {
	files := []*os.File{nil, os.Stderr, os.Stderr, channel, lifetime, cfg.Lock, policy, cred}
	if cfg.FirstSession != nil {
		files = append(files, cfg.FirstSession) // 8
	}
	return files
}

// rsArgs is RS's command line.
func rsArgs(cfg Config) []string {
	args := []string{locate.RS, "--channel-fd=3", "--lifetime-fd=4", "--lock-fd=5", "--policy-fd=6", "--credential-fd=7", "--log-level=" + cfg.LogLevel}
	if cfg.RolesExe != "" {
		args = append(args, "--roles-exe="+cfg.RolesExe)
	}
	if cfg.GitRoutingExe != "" {
		args = append(args, "--git-routing-exe="+cfg.GitRoutingExe)
	}
	if cfg.PreparerExe != "" {
		args = append(args, "--preparer-exe="+cfg.PreparerExe)
	}
	if cfg.FirstSession != nil {
		args = append(args, "--first-session-fd=8")
	}
	return args
}
