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

	"github.com/lazaret/lazaret/pkg/ignorerules"
)

// DaemonArg selects the Git-routing daemon role of lazaret-rs.
const DaemonArg = "__lazaret-git-routing"

// ReadyLine is printed on stdout once the filesystem is mounted.
const ReadyLine = "lazaret-git-routing-ready"

// Args are the daemon's command-line arguments after DaemonArg.
func Args(workspace, state, mountpoint, excludesFile string) []string {
	return []string{DaemonArg, "--workspace=" + workspace, "--state=" + state, "--mountpoint=" + mountpoint, "--excludes-file=" + excludesFile}
}

// Main runs the daemon in the Runtime Supervisor's namespaces (it is
// ns-root there, so it mounts directly with allow_other) until the
// filesystem is unmounted or SIGTERM arrives; it returns the exit status.
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
	var hide, guardFiles, guardTrees names
	fl.Var(&hide, "hide", "top-level name always routed to state (repeatable)")
	fl.Var(&guardFiles, "guard", "workspace-relative path host Git reads or runs, kept read-only (repeatable)")
	fl.Var(&guardTrees, "guard-tree", "workspace-relative directory kept read-only with everything beneath it (repeatable)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("role", "git_routing", "pid", os.Getpid())
	if *ws == "" || *state == "" || *mnt == "" {
		fmt.Fprintln(os.Stderr, "git-routing: --workspace, --state and --mountpoint are required")
		return 2
	}
	g := Guard{Files: guardFiles, Trees: guardTrees}
	if err := g.CheckPaths(); err != nil {
		fmt.Fprintln(os.Stderr, "git-routing:", err)
		return 2
	}
	srv, r, err := Mount(*ws, *state, *mnt, *excludes, hide, g, *isolate, log)
	if err != nil {
		log.Error("mount", "err", err)
		return 1
	}
	defer r.Close()
	fmt.Fprintln(os.Stdout, ReadyLine)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	go func() {
		<-sigs
		log.Info("unmounting on signal")
		if err := srv.Unmount(); err != nil {
			unix.Unmount(*mnt, unix.MNT_DETACH)
		}
	}()
	srv.Wait()
	return 0
}

// Mount loads the generation's rules and serves the routed workspace at
// mnt, enforcing the guard g. The caller owns the returned server and
// router.
func Mount(ws, state, mnt, excludesFile string, hidden []string, g Guard, isolate bool, log *slog.Logger) (*fuse.Server, *Router, error) {
	rules := ignorerules.NewRules()
	if isolate {
		var err error
		if rules, err = ignorerules.Load(ws, excludesFile); err != nil {
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
	r.passthrough = !isolate
	to := cacheTimeout
	if r.watch, err = newHostWatch(log); err != nil {
		log.Warn("no inotify: host changes reach the sandbox within the short cache lifetime", "err", err, "short_timeout", shortTimeout)
		r.watch, to = nil, shortTimeout
	}
	srv, err := fs.Mount(mnt, r.Root(), MountOptions(to))
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
	log.Info("git routing mounted", "workspace", ws, "state", state, "mountpoint", mnt, "passthrough", rules.Empty(), "guarded_files", len(g.Files), "guarded_trees", len(g.Trees))
	return srv, r, nil
}

// names is a repeatable string flag.
type names []string

func (n *names) String() string     { return strings.Join(*n, ",") }
func (n *names) Set(v string) error { *n = append(*n, v); return nil }

// MountOptions are the Git-routing filesystem's kernel cache lifetimes
// (entries, negative entries and attributes live for lifetime) and mount
// options. `make bench` mounts its FUSE floor with them too.
func MountOptions(lifetime time.Duration) *fs.Options {
	return &fs.Options{
		EntryTimeout: &lifetime, AttrTimeout: &lifetime, NegativeTimeout: &lifetime,
		MountOptions: fuse.MountOptions{
			AllowOther: true, DirectMount: true, DirectMountStrict: true,
			FsName: "lazaret-git-routing", Name: "lazaret", MaxWrite: 1 << 20, MaxBackground: 64,
			DisableXAttrs: true,
			// The sandbox's kernel (gVisor) clears setuid/setgid bits
			// itself; without this the host kernel re-reads attributes
			// (a GETATTR round trip) before every chown to do it again.
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV,
		},
	}
}
