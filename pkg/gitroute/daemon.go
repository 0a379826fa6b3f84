package gitroute

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/capability"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/ignorerules"
	"github.com/lazaret/lazaret/pkg/stickyignore"
	"github.com/lazaret/lazaret/pkg/timing"
)

// DaemonArg selects the Git-routing daemon role (of lazaret-gitroute,
// which RS runs it from, and of lazaret-rs).
const DaemonArg = "__lazaret-git-routing"

// ReadyLine is printed on stdout once the filesystem is mounted.
const ReadyLine = "lazaret-git-routing-ready"

// RulesLine follows ReadyLine on stdout once the workspace's ignore rules
// are complete (Router.RulesLoaded): the Runtime Supervisor reports the
// sandbox ready only after it. RulesErrorPrefix starts the line instead
// when they cannot be read; the daemon then exits.
const (
	RulesLine        = "lazaret-git-routing-rules-loaded"
	RulesErrorPrefix = "lazaret-git-routing-rules-error: "
)

// EndWatchesSignal asks a serving daemon to stop watching the host
// workspace: its sandbox is stopping (the Runtime Supervisor sends it at
// the start of its teardown, once the daemon reported ready).
const EndWatchesSignal = unix.SIGUSR1

// FileCapabilities are all the daemon keeps after its mount: the file
// permission overrides of its user namespace, which serving the sandbox's
// root needs (gVisor already checked the guest's permissions; root inside
// writes a 0444 file or one it does not own, and git writes its objects
// 0444 — the router reopens files by descriptor for I/O). They act only on
// files of the developer's ids; no CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID
// or any other remains.
var FileCapabilities = capability.Of(unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER, unix.CAP_FSETID)

// Args are the daemon's command-line arguments after DaemonArg.
func Args(workspace, state, mountpoint, excludesFile string) []string {
	return []string{DaemonArg, "--workspace=" + workspace, "--state=" + state, "--mountpoint=" + mountpoint, "--excludes-file=" + excludesFile}
}

// Main runs the daemon in the Runtime Supervisor's namespaces (it is
// ns-root there, so it mounts directly with allow_other), then drops every
// capability but FileCapabilities on every thread and sets no_new_privs
// before it reports ready,
// and serves until the filesystem is unmounted or SIGTERM arrives; it
// returns the exit status.
//
// Preconditions: started through the RS broker (its parent-death edge is
// armed by the wrapper), in RS's user and mount namespaces.
func Main(args []string) int {
	fl := flag.NewFlagSet("git-routing", flag.ContinueOnError)
	ws := fl.String("workspace", "", "canonical host path of the Agent Workspace")
	state := fl.String("state", "", "Ignored Workspace State directory of the Domain")
	mnt := fl.String("mountpoint", "", "where to mount the routed workspace")
	excludes := fl.String("excludes-file", "", "resolved core.excludesFile ('' for none)")
	isolate := fl.Bool("isolate", true, "route Git-ignored paths to state (false: no ignore rules; only hidden names and Git directories the host lacks go to state)")
	owner := fl.String("owner", "0:0", "guest UID:GID the developer's files are reported as (Ownership)")
	var hide, guardFiles, guardTrees names
	fl.Var(&hide, "hide", "top-level name always routed to state (repeatable)")
	rulesSnapshot := fl.String("rules-snapshot", "", "the coordinator's snapshot of the workspace's .gitignore files (ignorerules.WriteSnapshot), applied instead of a walk ('' for none)")
	stickyRoot := fl.String("sticky-root", "", "Domain Root whose record of sticky ignored paths (package stickyignore) also routes to state ('' for none)")
	fl.Var(&guardFiles, "guard", "workspace-relative path host Git reads or runs, kept read-only (repeatable)")
	fl.Var(&guardTrees, "guard-tree", "workspace-relative directory kept read-only with everything beneath it (repeatable)")
	guardFD := fl.Int("guard-fd", -1, "descriptor of guard updates (GuardUpdate lines) from the Runtime Supervisor")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	// The start-up trace (LAZARET_DEBUG=timing) names its file to the
	// daemon as to RS: its start and its mount are on the critical path.
	rec := timing.FromEnv("git-routing", os.Getenv, time.Now)
	rec.Mark("Git-routing daemon started")
	defer rec.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("role", "git_routing", "pid", os.Getpid())
	if *ws == "" || *state == "" || *mnt == "" {
		fmt.Fprintln(os.Stderr, "git-routing: --workspace, --state and --mountpoint are required")
		return 2
	}
	var sticky []string
	if *stickyRoot != "" && *isolate {
		rec, err := stickyignore.Load(*stickyRoot)
		if err != nil {
			log.Error("sticky ignored paths", "err", err)
			return 1
		}
		sticky = rec.Names()
	}
	var own Ownership
	if _, err := fmt.Sscanf(*owner, "%d:%d", &own.UID, &own.GID); err != nil {
		fmt.Fprintf(os.Stderr, "git-routing: --owner=%q is not UID:GID\n", *owner)
		return 2
	}
	g := Guard{Files: guardFiles, Trees: guardTrees}
	if err := g.CheckPaths(); err != nil {
		fmt.Fprintln(os.Stderr, "git-routing:", err)
		return 2
	}
	// Mounted, not yet served: the kernel holds every request to the mount
	// (INIT first) until the serve loop starts, below.
	var gitignores []ignorerules.Gitignore
	if *rulesSnapshot != "" && *isolate {
		var err error
		if gitignores, err = ignorerules.ReadSnapshot(*rulesSnapshot); err != nil {
			log.Error("the coordinator's .gitignore snapshot", "err", err)
			return 1
		}
		if gitignores == nil {
			gitignores = []ignorerules.Gitignore{} // read: none, no walk
		}
	}
	srv, r, err := MountHeld(*ws, *state, *mnt, *excludes, hide, sticky, g, own, *isolate, gitignores, log)
	if err != nil {
		log.Error("mount", "err", err)
		return 1
	}
	defer r.Close()
	rec.Mark("Git-routing filesystem mounted")
	// EndWatchesSignal from the Runtime Supervisor, at the start of its
	// teardown: the watches go (hostWatch.endWatches says why). Installed
	// before the ready line, after which RS may send it.
	endWatches := make(chan os.Signal, 1)
	signal.Notify(endWatches, EndWatchesSignal)
	go func() {
		<-endWatches
		r.watch.endWatches()
	}()
	if *guardFD >= 0 {
		unix.CloseOnExec(*guardFD)
		updates := os.NewFile(uintptr(*guardFD), "guard-updates")
		go readGuardUpdates(updates, r, log)
	}
	fmt.Fprintln(os.Stdout, ReadyLine)
	// The mount was the one privileged step: the daemon serves requests the
	// sandbox drives, so before it serves any it keeps only
	// FileCapabilities on any thread and can gain none (no_new_privs). That
	// takes ~35 world stops (capability.Bound), after the ready line: the
	// Runtime Supervisor goes on meanwhile (it reads the mount's identity
	// without a request), and nothing reaches the mount before runsc's
	// gofer, which then waits for the serve loop. The Runtime Supervisor,
	// not the daemon, unmounts at teardown; a daemon that cannot drop them
	// exits without serving, and RS refuses the start (it ends before its
	// rules line).
	if err := capability.Keep(FileCapabilities); err != nil {
		log.Error("drop capabilities after the mount; not serving it", "err", err)
		return 1
	}
	go srv.Serve()
	// The workspace's .gitignore files: the coordinator's snapshot, added
	// before the mount, or a walk behind it; until they are in, the rules
	// decide nothing (Routing.Ignored waits). Rules that cannot be read end
	// the daemon: its mount then fails every request, and the Runtime
	// Supervisor refuses the start with the reason.
	mounted := time.Now()
	go func() {
		if err := <-r.RulesLoaded(); err != nil {
			log.Error("ignore rules", "err", err)
			fmt.Fprintln(os.Stdout, RulesErrorPrefix+strings.ReplaceAll(err.Error(), "\n", " "))
			os.Exit(1)
		}
		log.Info("ignore rules loaded", "rules", !r.rules.Empty(), "after_mount_ms", time.Since(mounted).Milliseconds())
		fmt.Fprintln(os.Stdout, RulesLine)
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	go func() {
		<-sigs
		// Without capabilities the unmount fails unless the Runtime
		// Supervisor already unmounted (it does, before SIGTERM); either way
		// the server loop ends once the kernel ends the connection, or
		// with this process.
		log.Info("stopping on signal")
		if err := srv.Unmount(); err != nil {
			log.Info("the daemon cannot unmount (no capabilities): exiting", "err", err)
			os.Exit(0)
		}
	}()
	// Serving needs little of what loading the rules and mounting did.
	idlemem.SettleSoon(log)
	srv.Wait()
	return 0
}

// Mount loads the generation's rules and serves the routed workspace at
// mnt, enforcing the guard g; sticky paths are routed to state too
// (Routing.AddSticky) and files are owned by the rule own. The caller owns the returned server and router.
func Mount(ws, state, mnt, excludesFile string, hidden, sticky []string, g Guard, own Ownership, isolate bool, log *slog.Logger) (*fuse.Server, *Router, error) {
	srv, r, err := MountHeld(ws, state, mnt, excludesFile, hidden, sticky, g, own, isolate, nil, log)
	if err == nil {
		go srv.Serve()
	}
	return srv, r, err
}

// MountHeld is Mount without serving: the kernel holds every request to
// the new mount (the connection's INIT first) until the caller starts
// srv.Serve. With gitignores (not nil: the coordinator's snapshot of the
// workspace's .gitignore files) the rules are complete at once, without
// the walk.
func MountHeld(ws, state, mnt, excludesFile string, hidden, sticky []string, g Guard, own Ownership, isolate bool, gitignores []ignorerules.Gitignore, log *slog.Logger) (*fuse.Server, *Router, error) {
	// The index and the global rule files are read now; the workspace's
	// .gitignore files come from gitignores, or, without them, a walk of
	// the whole tree after the mount (Router.loadRules).
	rules := ignorerules.NewRules()
	if isolate {
		var err error
		if rules, err = ignorerules.LoadTracked(ws, excludesFile); err != nil {
			return nil, nil, err
		}
	}
	hostFD, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open workspace", Path: ws, Err: err}
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		unix.Close(hostFD)
		return nil, nil, err
	}
	stateFD, err := unix.Open(state, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		unix.Close(hostFD)
		return nil, nil, &os.PathError{Op: "open ignored workspace state", Path: state, Err: err}
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && int64(lim.Cur/4) < maxCachedFDs {
		maxCachedFDs = int64(lim.Cur / 4) // kept read descriptors: a quarter of the limit at most
	}
	r := NewRouter(hostFD, stateFD, rules, hidden, g)
	r.log, r.refused.log, r.ws = log, log, ws
	r.loadRules(ws, isolate, gitignores)
	r.passthrough = !isolate
	r.SetOwnership(own)
	r.AddSticky(sticky...)
	if n, err := r.SeedSubmoduleGitfiles(ws, rules.Gitlinks()); err != nil {
		log.Warn("submodule gitfiles not given to the sandbox: Git inside works on the superproject in their working trees", "err", err)
	} else if n > 0 {
		log.Info("submodule gitfiles given to the sandbox", "count", n)
	}
	to := cacheTimeout
	if r.watch, err = newHostWatch(log); err != nil {
		log.Warn("no inotify: host changes reach the sandbox within the short cache lifetime", "err", err, "short_timeout", shortTimeout)
		r.watch, to = nil, shortTimeout
	}
	srv, err := mountFS(mnt, r.Root(), MountOptions(to))
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("mount the Git-routing filesystem at %s: %w (is /dev/fuse usable by this user? `lazaret doctor` checks it)", mnt, err)
	}
	if r.watch != nil {
		r.watch.r = r
		var st unix.Stat_t
		if err := unix.Fstat(hostFD, &st); err == nil {
			r.watch.root = r.root.EmbeddedInode()
			r.watch.add(r.watch.root, hostFD, st.Ino)
		}
		go r.watch.run()
	}
	log.Info("git routing mounted", "workspace", ws, "state", state, "mountpoint", mnt, "isolate", isolate, "sticky_paths", len(sticky), "guarded_files", len(g.Files), "guarded_trees", len(g.Trees))
	return srv, r, nil
}

// mountFS mounts root at mnt, like go-fuse's fs.Mount but without serving
// it and without its WaitMount: that probes the new mount from this very
// process (it opens, polls and closes a magic file on it). A daemon
// SIGKILLed while it has a file or a request outstanding on its own mount
// can never exit: the close at exit (FLUSH) waits for a reply only its dead
// serve loop could send, so it stays in D state until someone aborts the
// connection through fusectl. The daemon therefore never touches its own
// mount. With a direct mount, mount(2) has already succeeded when NewServer
// returns, and the kernel holds every request until the serve loop
// (srv.Serve, the caller's) answers INIT; the probe exists for processes
// that poll their own FUSE files through Go's netpoller, which this daemon
// does not do.
func mountFS(mnt string, root fs.InodeEmbedder, opts *fs.Options) (*fuse.Server, error) {
	return fuse.NewServer(fs.NewNodeFS(root, opts), mnt, &opts.MountOptions)
}

// names is a repeatable string flag.
type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

// MaxWrite is the largest READ or WRITE request the kernel sends the
// daemon. go-fuse gives each goroutine reading the FUSE device a buffer of
// MaxWrite plus a page. 256 KiB instead of 1 MiB was measured on two cores
// (20 idle Domains at once): the daemon's idle anonymous memory did not
// change (4.4 MiB per Domain either way), and a 256 MiB dd through the
// router ran at the same speed, so the larger requests stay.
const MaxWrite = 1 << 20

// MountOptions are the Git-routing filesystem's kernel cache lifetimes
// (entries, negative entries and attributes live for lifetime) and mount
// options. `make bench` mounts its FUSE floor with them too.
func MountOptions(lifetime time.Duration) *fs.Options {
	return &fs.Options{
		EntryTimeout: &lifetime, AttrTimeout: &lifetime, NegativeTimeout: &lifetime,
		MountOptions: fuse.MountOptions{
			AllowOther: true, DirectMount: true, DirectMountStrict: true,
			FsName: "lazaret-git-routing", Name: "lazaret", MaxWrite: MaxWrite, MaxBackground: 64,
			DisableXAttrs: true,
			// The sandbox's kernel (gVisor) clears setuid/setgid bits
			// itself; without this the host kernel re-reads attributes
			// (a GETATTR round trip) before every chown to do it again.
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV,
		},
	}
}
