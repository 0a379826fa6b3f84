// Package procguard is a go/analysis checker for the spec's process rules
// (§3.2, CausalChildAcquisitionV1): exactly one spawn/SIGCHLD/reap broker per
// Host Coordinator and Runtime Supervisor process, and no numeric-pid
// signalling. It reports every reference — call or function value — to a
// process-spawning, waiting, reaping or signalling API outside the places an
// explicit allow-list names with its reason, and every argv of Lazaret's
// own code that asks runsc to signal numeric pids for it (RunscArgv:
// `runsc kill --all`, `runsc delete`), which nothing may allow. procguard_test.go runs it over
// every package the binaries link, dependencies included, so a
// dependency that spawns or reaps is seen and must be justified.
package procguard

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"sort"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// Forbidden lists the guarded process APIs by types.Func FullName.
var Forbidden = map[string]string{
	"os.StartProcess":                       "spawn",
	"os.FindProcess":                        "numeric-pid handle",
	"(*os.Process).Wait":                    "wait/reap",
	"(*os.Process).Signal":                  "signal",
	"(*os.Process).Kill":                    "signal",
	"(*os/exec.Cmd).Start":                  "spawn",
	"(*os/exec.Cmd).Run":                    "spawn+wait",
	"(*os/exec.Cmd).Output":                 "spawn+wait",
	"(*os/exec.Cmd).CombinedOutput":         "spawn+wait",
	"(*os/exec.Cmd).Wait":                   "wait/reap",
	"syscall.ForkExec":                      "spawn",
	"syscall.StartProcess":                  "spawn",
	"syscall.Kill":                          "numeric-pid signal",
	"syscall.Tgkill":                        "numeric-pid signal",
	"syscall.Wait4":                         "wait/reap",
	"golang.org/x/sys/unix.Kill":            "numeric-pid signal",
	"golang.org/x/sys/unix.Tgkill":          "numeric-pid signal",
	"golang.org/x/sys/unix.Tkill":           "numeric-pid signal",
	"golang.org/x/sys/unix.Wait4":           "wait/reap",
	"golang.org/x/sys/unix.Waitid":          "wait/reap",
	"golang.org/x/sys/unix.PidfdSendSignal": "pidfd signal",
	"golang.org/x/sys/unix.PidfdOpen":       "pidfd open",
}

// ProjectForbidden lists dependency entry points that wrap the APIs above.
// Lazaret's own packages must never reference them: the dependency bodies
// are allow-listed in DependencyAllowed on exactly that condition.
var ProjectForbidden = map[string]string{
	"(*github.com/mdlayher/socket.Conn).Waitid":          "wait/reap",
	"(*github.com/mdlayher/socket.Conn).PidfdSendSignal": "pidfd signal",
	"go.podman.io/storage/pkg/system.IsProcessAlive":     "numeric-pid signal",
	"go.podman.io/storage/pkg/system.KillProcess":        "numeric-pid signal",
	"go.podman.io/storage/pkg/unshare.Command":           "spawn",
	"github.com/getsentry/sentry-go.Init":                "spawn (release detection runs git)",
	"github.com/getsentry/sentry-go.NewClient":           "spawn (release detection runs git)",
}

// Allowed names, per package path, the guarded APIs it may use and why.
// Every entry must be used (procguard_test.go fails on a stale entry).
var Allowed = map[string]map[string]string{
	"github.com/lazaret/lazaret/pkg/proc": {
		"syscall.ForkExec": "the broker: every spawn, from its locked thread",
	},
	"github.com/lazaret/lazaret/pkg/pidfs": {
		"golang.org/x/sys/unix.Waitid":          "waitid(P_PIDFD) on a retained pidfd only",
		"golang.org/x/sys/unix.PidfdSendSignal": "signal through a retained pidfd only",
		"golang.org/x/sys/unix.PidfdOpen":       "pidfd_open once per lookup (PidfsRecoveryMatch step 4), then fstat-matched",
	},
	"github.com/lazaret/lazaret/pkg/sandboxinit": {
		"golang.org/x/sys/unix.Wait4": "the guest's PID 1 reaps orphans and the first session's command inside the sandbox (never a host process)",
		"syscall.ForkExec":            "the guest's PID 1 starts the first session's command inside the sandbox (never a host process), its only spawn",
		"golang.org/x/sys/unix.Kill":  "the guest's PID 1 signals the first session's command (or its group, which it leads) by a guest pid it has not reaped yet, so not a recycled one",
	},
}

// DependencyAllowed names guarded APIs used inside third-party dependencies
// the binaries link, with why each cannot break the broker's guarantees.
// The broker waits only with waitid(P_PIDFD) on its own pidfds, so a
// dependency's pid-specific wait can never collect a broker child's status.
var DependencyAllowed = map[string]map[string]string{
	"github.com/mdlayher/socket": {
		"golang.org/x/sys/unix.Waitid":          "inside (*socket.Conn).Waitid, which Lazaret never calls (ProjectForbidden lists it): only SEQPACKET sockets are wrapped",
		"golang.org/x/sys/unix.PidfdSendSignal": "inside (*socket.Conn).PidfdSendSignal, never called by Lazaret (ProjectForbidden lists it)",
	},
	"github.com/getsentry/sentry-go": {
		"(*os/exec.Cmd).Output": "release detection (git describe) inside sentry.NewClient, linked through pebble's cockroachdb/errors; Lazaret never creates a Sentry client (ProjectForbidden lists Init and NewClient)",
	},
	"github.com/hanwen/go-fuse/v2/fuse": {
		"os.StartProcess":    "fusermount fallback of mount, never taken: the Git-routing daemon mounts with DirectMountStrict (mount(2) as ns-root, no fallback)",
		"(*os.Process).Wait": "waits for exactly that fusermount child (pid-specific); never reached under DirectMountStrict",
		"(*os/exec.Cmd).Run": "fusermount -u fallback of unmount, never taken under DirectMountStrict (umount(2) only)",
	},
	"github.com/docker/docker-credential-helpers/client": {
		"(*os/exec.Cmd).Output": "registry credential helpers, run only by the preparer role (lazaret-cli, RS's child, which acquires no child) for a docker:// image; pid-specific wait",
	},
	"go.podman.io/image/v5/docker": {
		"(*os/exec.Cmd).Run": "additional-layer-store auth helper, only for docker:// images with that store configured, in the preparer role (which acquires no child)",
	},
	"go.podman.io/storage/pkg/archive": {
		"(*os/exec.Cmd).Run": "external decompressor for some layer formats, in the preparer role (which acquires no child)",
	},
	"go.podman.io/storage/pkg/chrootarchive": {
		"(*os/exec.Cmd).Start": "the chrooted layer-apply re-exec of lazaret-cli (reexec.Init in its main), in the preparer role (which acquires no child)",
		"(*os/exec.Cmd).Wait":  "waits for exactly that re-exec child (pid-specific)",
		"(*os/exec.Cmd).Run":   "the chrooted layer-apply re-exec of lazaret-cli, in the preparer role (which acquires no child)",
	},
	"go.podman.io/storage/pkg/idtools": {
		"(*os/exec.Cmd).CombinedOutput": "getent/user tools for id lookups, reached only from the preparer role (which acquires no child)",
	},
	"go.podman.io/storage/pkg/system": {
		"golang.org/x/sys/unix.Kill": "inside system.IsProcessAlive/KillProcess, never called by Lazaret (ProjectForbidden lists them)",
	},
	"go.podman.io/storage/pkg/unshare": {
		"(*os/exec.Cmd).Start": "unshare.Command re-exec helpers, never called by Lazaret (ProjectForbidden lists unshare.Command)",
		"(*os.Process).Kill":   "inside unshare's re-exec helpers, never called by Lazaret",
		"(*os/exec.Cmd).Wait":  "inside unshare's re-exec helpers, never called by Lazaret",
		"(*os/exec.Cmd).Run":   "inside unshare's re-exec helpers, never called by Lazaret",
		"(*os.Process).Signal": "inside unshare's re-exec helpers, never called by Lazaret",
	},
}

// ProjectPrefix is the import path prefix of Lazaret's own packages.
const ProjectPrefix = "github.com/lazaret/lazaret/"

// Finding is one guarded reference.
type Finding struct {
	Pkg, Func, Kind, Pos string
}

// Analyzer reports guarded references not allowed for the package.
var Analyzer = &analysis.Analyzer{
	Name: "procguard",
	Doc:  "report process spawn/wait/signal APIs used outside Lazaret's broker and allow-list",
	Run:  run,
}

func run(pass *analysis.Pass) (any, error) {
	for _, f := range Findings(pass.Pkg, pass.TypesInfo, pass.Files, pass.Fset) {
		if _, ok := RunscArgv[f.Func]; ok {
			pass.Reportf(f.node.Pos(), "%s (%s): stop the sandbox, gofer and client through proven pidfds and remove the state with runsc.RemoveState", f.Func, f.Kind)
			continue
		}
		if allowed(f) {
			continue
		}
		pass.Reportf(f.node.Pos(), "%s (%s) outside the process broker: route it through pkg/proc or add a justified allow-list entry", f.Func, f.Kind)
	}
	return nil, nil
}

type finding struct {
	Finding
	node ast.Node
}

// Allowed reports whether the finding is on the allow-list.
func (f finding) Allowed() bool { return allowed(f) }

func allowed(f finding) bool {
	_, ok := Allowed[f.Pkg][f.Func]
	return ok
}

// RunscArgv names the runsc command lines Lazaret must never build, with
// why: each makes runsc SIGKILL the host pids its state file names (the
// sandbox's and the gofer's), which after a crash may be unrelated
// processes of the developer. Only an argv's string constants are seen:
// the elements of one []string literal, or the arguments of one call (a
// variadic argv builder such as runsc.Runtime's, or append).
var RunscArgv = map[string]string{
	"runsc argv: kill --all": "numeric-pid signal (runsc kill --all SIGKILLs the sandbox pid of a container it believes Created)",
	"runsc argv: delete":     "numeric-pid signal (runsc delete SIGKILLs the state file's sandbox and gofer pids, with or without -force)",
}

// runscArgvFinding reports which RunscArgv entry the constant tokens of one
// argv expression match, if any.
func runscArgvFinding(tokens []string) string {
	var kill, all bool
	for _, t := range tokens {
		switch {
		case t == "delete":
			return "runsc argv: delete"
		case t == "kill":
			kill = true
		case t == "--all" || t == "-all" || strings.HasPrefix(t, "--all=") || strings.HasPrefix(t, "-all="):
			all = true
		}
	}
	if kill && all {
		return "runsc argv: kill --all"
	}
	return ""
}

// argvTokens returns the string constants among exprs.
func argvTokens(info *types.Info, exprs []ast.Expr) []string {
	var out []string
	for _, e := range exprs {
		if tv, ok := info.Types[e]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
			out = append(out, constant.StringVal(tv.Value))
		}
	}
	return out
}

// checksArgv reports whether pkg's own argv expressions are checked:
// Lazaret's packages and analysistest packages, never a dependency.
func checksArgv(pkg *types.Package) bool {
	return strings.HasPrefix(pkg.Path(), ProjectPrefix) || !IsProjectOrDependency(pkg.Path())
}

// Findings lists every guarded reference in files, allowed or not.
func Findings(pkg *types.Package, info *types.Info, files []*ast.File, fset *token.FileSet) []finding {
	var out []finding
	argv := checksArgv(pkg)
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			if argv {
				var exprs []ast.Expr
				switch x := n.(type) {
				case *ast.CompositeLit:
					exprs = x.Elts
				case *ast.CallExpr:
					exprs = x.Args
				}
				if name := runscArgvFinding(argvTokens(info, exprs)); name != "" {
					out = append(out, finding{Finding{Pkg: pkg.Path(), Func: name, Kind: RunscArgv[name], Pos: fset.Position(n.Pos()).String()}, n})
				}
			}
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			fn, ok := info.Uses[id].(*types.Func)
			if !ok {
				return true
			}
			name := fn.FullName()
			kind, bad := Forbidden[name]
			if !bad && strings.HasPrefix(pkg.Path(), ProjectPrefix) {
				kind, bad = ProjectForbidden[name]
			}
			if bad {
				out = append(out, finding{Finding{Pkg: pkg.Path(), Func: name, Kind: kind, Pos: fset.Position(id.Pos()).String()}, id})
			}
			return true
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pos < out[j].Pos })
	return out
}

// IsProjectOrDependency reports whether a package path is outside the
// standard library (std implements the guarded APIs themselves).
func IsProjectOrDependency(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return strings.Contains(first, ".")
}
