//go:build lazaret_bench

package integration

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var flagNpmCache = flag.String("npm-cache", "", "npm cache holding the packages of testdata/npm-project (scripts/setup.sh bench-npm fills it and prints its path)")

// npmProject is the bench's npm project: a package.json and the lock file
// that pins its packages (175, none with install scripts).
const npmProject = "testdata/npm-project"

// npmScript copies the npm cache from the workspace's tarball into the
// guest's /tmp, then times `npm ci --offline` in the project copy pI below
// dir (a fresh node_modules: no run follows a deletion); it prints
// "npm_ci MICROSECONDS" and "installed PACKAGES" (the entries of
// node_modules/.package-lock.json).
func npmScript(dir string, i int) string {
	return npmScriptIn(dir, "p"+strconv.Itoa(i))
}

// npmScriptIn is npmScript for the project in sub below dir ("." for dir
// itself).
func npmScriptIn(dir, sub string) string {
	return fmt.Sprintf(`set -e
cd %[1]s
rm -rf /tmp/npm-bench-cache
mkdir -p /tmp/npm-bench-cache
tar -xf npm-cache.tar -C /tmp/npm-bench-cache
s=$(date +%%s%%N)
(cd %[2]s && npm ci --offline --ignore-scripts --no-audit --no-fund --no-update-notifier --loglevel=error --cache /tmp/npm-bench-cache >/dev/null)
e=$(date +%%s%%N); echo "npm_ci $(( (e - s) / 1000 ))"
echo "installed $(node -e 'console.log(Object.keys(require(process.argv[1]).packages).length)' "$PWD/%[2]s/node_modules/.package-lock.json")"`, dir, sub)
}

// TestBenchNpmInstall (issue 25, item 3): a real `npm ci` of a project of
// 175 packages into its node_modules, a directory the workspace's
// .gitignore names, inside Lazaret (node profile) and inside bare runsc
// with a plain bind of the workspace over the same image. Lazaret installs
// twice per run: into pI/node_modules of one workspace (created after the
// start, so the Git-routing daemon serves it from its Domain-state copy)
// and into the top-level node_modules of a new workspace (named by the
// .gitignore's top-level pattern, so a direct bind of its Domain-state
// copy: what a project gets by default). Both install offline from the
// same npm cache, which scripts/setup.sh bench-npm fetched once from the
// npm registry: the local mirror. Target: the bound install ≤ 1.5× the
// plain bind (what item 3 binds); the router-served one, a node_modules
// that did not exist when the Domain started, is reported beside it.
func TestBenchNpmInstall(t *testing.T) {
	e := need(t)
	if *flagNpmCache == "" {
		t.Fatal("-npm-cache is not set: make bench passes it (scripts/setup.sh bench-npm prints the cache's path)")
	}
	if _, err := os.Stat(filepath.Join(*flagNpmCache, "_cacache", "index-v5")); err != nil {
		t.Fatalf("-npm-cache %s is not an npm cache (%v): run scripts/setup.sh bench-npm as root", *flagNpmCache, err)
	}
	n := *flagRuns
	if n > 5 {
		n = 5
	}
	pkgJSON, err := os.ReadFile(filepath.Join(npmProject, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	lockJSON, err := os.ReadFile(filepath.Join(npmProject, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]json.RawMessage `json:"packages"`
	}
	if err := json.Unmarshal(lockJSON, &lock); err != nil {
		t.Fatalf("%s/package-lock.json: %v", npmProject, err)
	}
	packages := len(lock.Packages) - 1 // the project itself is the "" entry
	if packages < 100 {
		t.Fatalf("%s pins %d packages; the figure needs at least 100", npmProject, packages)
	}
	// One workspace per setup, each a Git repository whose .gitignore names
	// node_modules/, with n copies of the project and the cache as a
	// tarball. The setups write into different directories: nothing is
	// deleted between the measurements.
	prepare := func() string {
		ws := workspace(t)
		git := gitRepo(t, e, ws)
		writeAs(t, e, filepath.Join(ws, ".gitignore"), "node_modules/\n")
		for i := 1; i <= n; i++ {
			writeAs(t, e, filepath.Join(ws, "p"+strconv.Itoa(i), "package.json"), string(pkgJSON))
			writeAs(t, e, filepath.Join(ws, "p"+strconv.Itoa(i), "package-lock.json"), string(lockJSON))
		}
		git("add", "-A")
		git("commit", "-qm", "npm projects")
		tarball := filepath.Join(ws, "npm-cache.tar")
		if out, err := exec.Command("tar", "-cf", tarball, "-C", *flagNpmCache, ".").CombinedOutput(); err != nil {
			t.Fatalf("tar the npm cache: %v\n%s", err, out)
		}
		os.Chown(tarball, e.uid, e.gid)
		return ws
	}
	results := map[string][]float64{}
	run := func(name, ws string, argv ...string) {
		times, out := benchTimes(t, e, ws, name, argv...)
		var installed []string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "installed" {
				installed = append(installed, f[1])
			}
		}
		if len(times["npm_ci"]) != 1 || len(installed) != 1 {
			t.Fatalf("%s output: %s", name, out)
		}
		if installed[0] != strconv.Itoa(packages) {
			t.Fatalf("%s: npm ci installed %s packages, the lock file pins %d\n%s", name, installed[0], packages, out)
		}
		results[name] = append(results[name], times["npm_ci"][0])
	}
	lazaret := filepath.Join(e.bin, "lazaret")

	// Lazaret, node profile (Node.js and npm from its recipe image, as user
	// agent), and bare runsc with a plain bind of a second workspace over a
	// prepared lower of a recipe image with Node.js: every such image has
	// the same pinned node and npm (the recipe's Node.js steps). The
	// warm-up prepares the node image's lower. The two alternate, so a slow
	// phase of the machine (or of its disk) weighs on both alike.
	ws, bws := prepare(), prepare()
	// A new workspace per run with the project at its top level.
	prepareTop := func() string {
		ws := workspace(t)
		git := gitRepo(t, e, ws)
		writeAs(t, e, filepath.Join(ws, ".gitignore"), "node_modules/\n")
		writeAs(t, e, filepath.Join(ws, "package.json"), string(pkgJSON))
		writeAs(t, e, filepath.Join(ws, "package-lock.json"), string(lockJSON))
		git("add", "-A")
		git("commit", "-qm", "npm project")
		if err := os.Link(filepath.Join(bws, "npm-cache.tar"), filepath.Join(ws, "npm-cache.tar")); err != nil {
			t.Fatalf("link the npm cache tarball: %v", err)
		}
		return ws
	}
	asUser(t, e, ws, lazaret, "run", "-p", "node", "--", "true")
	noLeftovers(t)
	var rootfs string
	arts, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "prepared", "pl-*", "rootfs"))
	for _, a := range arts {
		if _, err := os.Stat(filepath.Join(a, "usr", "local", "bin", "npm")); err == nil {
			rootfs = a
		}
	}
	if rootfs == "" {
		t.Fatalf("no prepared lower with /usr/local/bin/npm among %v after a run of the node profile", arts)
	}
	for i := 1; i <= n; i++ {
		script := npmScript("/workspace", i)
		routed := func() {
			run("lazaret_router", ws, lazaret, "run", "-p", "node", "--", "sh", "-c", script)
			noLeftovers(t)
			if _, err := os.Lstat(filepath.Join(ws, "p"+strconv.Itoa(i), "node_modules")); err == nil {
				t.Fatal("node_modules, an ignored directory, reached the host workspace")
			}
		}
		bound := func() {
			tws := prepareTop()
			run("lazaret_bound", tws, lazaret, "run", "-p", "node", "--", "sh", "-c", npmScriptIn("/workspace", "."))
			noLeftovers(t) // its teardown gives the bound directory back
			if _, err := os.Lstat(filepath.Join(tws, "node_modules")); err == nil {
				t.Fatal("node_modules, a bound ignored directory, reached the host workspace")
			}
		}
		// The bare run sits between the two Lazaret runs, which swap
		// places every run.
		first, last := routed, bound
		if i%2 == 0 {
			first, last = bound, routed
		}
		first()
		argv := bareRunscBind(t, e, "bench-npm", rootfs, bws, map[string]any{"args": []string{"/bin/sh", "-c", script}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}, "env": []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"}})
		run("bare_runsc_plain_bind", bws, argv...)
		noLeftovers(t)
		last()
	}

	l, b, lb := median(results["lazaret_router"]), median(results["bare_runsc_plain_bind"]), median(results["lazaret_bound"])
	fmt.Printf("\nnpm ci --offline of %d packages into a top-level node_modules, bound from Ignored Workspace State (a new workspace each run; median of %d): Lazaret %.1f ms, bare runsc with a plain bind %.1f ms: %.2fx (target <= 1.5x)\n", packages, n, lb, b, lb/b)
	fmt.Printf("the same into pI/node_modules, created after the start and so served by the Git-routing daemon: Lazaret %.1f ms: %.2fx the plain bind (reported; a directory that did not exist at the start cannot be bound)\n", l, l/b)
	rep := benchReport{When: time.Now().UTC(), Commit: os.Getenv("LAZARET_COMMIT"),
		Measurements: []measurement{
			{Name: "bare_runsc_plain_bind_npm_ci", MedianMS: b, RunsMS: results["bare_runsc_plain_bind"]},
			{Name: "lazaret_router_npm_ci", MedianMS: l, RunsMS: results["lazaret_router"]},
			{Name: "lazaret_bound_npm_ci", MedianMS: lb, RunsMS: results["lazaret_bound"]},
		},
		Ratios: map[string]float64{"npm_ci_vs_plain_bind": l / b, "npm_ci_bound_vs_plain_bind": lb / b}}
	recordBench(t, "npm_install", "ms", rep)
}
