//go:build lazaret_bench

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/lazaret/lazaret/pkg/gitroute"
)

// gitRouteScript times, inside (or on the host), N warm `git status` runs
// and N untars of the 5,000-file tarball into a non-ignored directory, an
// ignored directory the ignore rules name by a top-level directory pattern
// (ignored/: inside Lazaret a direct bind of its Ignored Workspace State
// copy) and an ignored directory named by a wildcard pattern (*_router/:
// inside Lazaret served by the Git-routing daemon); it prints
// "status|plain|ignored|ignored_router MS" lines.
func gitRouteScript(dir string, n int) string {
	return fmt.Sprintf(`set -e
cd %[1]s
git status --porcelain >/dev/null
t() { s=$(date +%%s%%N); "$@" >/dev/null; e=$(date +%%s%%N); echo $(( (e - s) / 1000 )); }
for i in $(seq %[2]d); do mkdir -p untar-$i ignored/untar-$i ignored_router/untar-$i; done
for i in $(seq %[2]d); do
  echo "status $(t git status --porcelain)"
  echo "plain $(t tar --no-same-owner -xf bench.tar -C untar-$i)"
  echo "ignored $(t tar --no-same-owner -xf bench.tar -C ignored/untar-$i)"
  echo "ignored_router $(t tar --no-same-owner -xf bench.tar -C ignored_router/untar-$i)"
done`, dir, n)
}

func parseTimes(t *testing.T, out string) map[string][]float64 {
	m := map[string][]float64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			if us, err := strconv.Atoi(f[1]); err == nil {
				m[f[0]] = append(m[f[0]], float64(us)/1000)
			}
		}
	}
	return m
}

// benchTimes runs argv in ws as the test user and returns the "KEY
// MICROSECONDS" lines it printed, in ms by key, and its whole output; a
// failed command fails the bench under name.
func benchTimes(t *testing.T, e *env, ws, name string, argv ...string) (map[string][]float64, string) {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = ws
	c.Env = append(userEnv(e), "GIT_CONFIG_NOSYSTEM=1")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return parseTimes(t, string(out)), string(out)
}

// bareRunscBind writes a bundle (directory name under the test user's
// base) running process over rootfs (a prepared lower, read-only, with
// runsc's in-memory overlay) with a read-write bind of ws at /workspace,
// and returns the command that runs it with bare runsc as the
// test user, in a user+mount+net namespace with the full subordinate map
// and the same sentry dentry cache as Lazaret's (runsc.DentryCache: a
// quarter of the user's hard RLIMIT_NOFILE), so a ratio against it isolates
// what Lazaret adds.
func bareRunscBind(t *testing.T, e *env, name, rootfs, ws string, process map[string]any) []string {
	t.Helper()
	bundle := e.userDir(name + "-bundle")
	spec := map[string]any{
		"ociVersion": "1.0.0",
		"process":    process,
		"root":       map[string]any{"path": "rootfs"},
		"linux":      map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}},
		"mounts": []map[string]any{{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/workspace", "type": "bind", "source": ws, "options": []string{"rbind", "rw"}}},
	}
	js, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755)
	os.Chown(filepath.Join(bundle, "rootfs"), e.uid, e.gid)
	script := fmt.Sprintf(`set -e
mount --bind %[1]s %[2]s/rootfs; mount -o remount,bind,ro %[2]s/rootfs
ip link set lo up
d=$(( $(ulimit -Hn) / 4 )); [ $d -lt 1000 ] && d=1000; [ $d -gt 65536 ] && d=65536
%[3]s --root=%[2]s/state --ignore-cgroups --network=sandbox --overlay2=root:memory --file-access-mounts=shared --dcache=$d run --bundle %[2]s bare-%[4]s`, rootfs, bundle, e.runsc, name)
	sub := strconv.Itoa(e.subStart) + ",1,65536"
	return []string{"unshare", "--user", "--map-user=0", "--map-group=0", "--map-users=" + sub, "--map-groups=" + sub, "--mount", "--net", "--propagation", "private", "sh", "-c", script}
}

// benchRepo generates the 5,000-file repository, a 5,000-small-file
// tarball and the untar target directories for n runs of each setup.
func benchRepo(t *testing.T, e *env, ws string, n int, setups []string) {
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), "ignored/\n*_router/\n")
	for d := 0; d < 50; d++ {
		for f := 0; f < 100; f++ {
			writeAs(t, e, filepath.Join(ws, "src", fmt.Sprintf("d%02d", d), fmt.Sprintf("f%03d.txt", f)), fmt.Sprintf("file %d/%d\n", d, f))
		}
	}
	git("add", "-A")
	git("commit", "-qm", "5000 files")
	gen := e.userDir("bench-tar-src")
	for d := 0; d < 50; d++ {
		for f := 0; f < 100; f++ {
			writeAs(t, e, filepath.Join(gen, fmt.Sprintf("p%02d", d), fmt.Sprintf("m%03d.js", f)), "module.exports = 1;\n")
		}
	}
	if out, err := exec.Command("tar", "-cf", filepath.Join(ws, "bench.tar"), "-C", gen, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	os.Chown(filepath.Join(ws, "bench.tar"), e.uid, e.gid)
	git("add", "bench.tar")
	git("commit", "-qm", "tarball")
	_ = setups
}

// TestBenchGitRouting (spec §3.4): warm `git status` of a
// 5,000-file repository and a 5,000-small-file untar into a non-ignored
// directory, an ignored directory named by a top-level directory pattern
// (inside Lazaret a direct bind of its Ignored Workspace State copy) and an
// ignored directory named by a wildcard (inside Lazaret served by the
// Git-routing daemon) — on the host, inside bare runsc with a plain bind
// of the workspace, and inside Lazaret; through go-fuse's pass-through
// loopback on the host and bound into bare runsc — plus Lazaret's cold
// start in that repository. Targets (reported, in "ratios"): router ≤ 1.3×
// plain bind for git status, ≤ 1.5× for the untar; the bound ignored
// directory ≤ 1.3× plain bind (issue 25), taken from pairs of single
// untars run back to back (see below).
func TestBenchGitRouting(t *testing.T) {
	e := need(t)
	n := *flagRuns
	if n > 5 {
		n = 5
	}
	lazaret := filepath.Join(e.bin, "lazaret")
	results := map[string]map[string][]float64{}
	// The previous setup's untar targets are moved out of the workspace,
	// not deleted: ext4 skips inodes deleted in the last minutes when it
	// allocates new ones (recently_deleted), so deleting 15,000 files
	// made the next setup's untars several times slower (host untar 0.12 s
	// after a quiet minute, 2 s right after a deletion) and the ratios
	// depended on the order of the setups. The moved trees are deleted
	// after the last measurement.
	trash := e.userDir("bench-git-trash")
	defer os.RemoveAll(trash)
	moved := 0
	run := func(name, ws string, argv ...string) {
		for _, d := range []string{"ignored", "ignored_router", "untar-1", "untar-2", "untar-3", "untar-4", "untar-5"} {
			if _, err := os.Lstat(filepath.Join(ws, d)); err == nil {
				moved++
				if err := os.Rename(filepath.Join(ws, d), filepath.Join(trash, strconv.Itoa(moved))); err != nil {
					t.Fatalf("move %s out of the workspace: %v", d, err)
				}
			}
		}
		var out string
		results[name], out = benchTimes(t, e, ws, name, argv...)
		if len(results[name]["status"]) != n || len(results[name]["plain"]) != n || len(results[name]["ignored"]) != n || len(results[name]["ignored_router"]) != n {
			t.Fatalf("%s output: %s", name, out)
		}
	}
	ws := workspace(t)
	benchRepo(t, e, ws, n, nil)
	run("host", ws, "sh", "-c", gitRouteScript(ws, n))
	// Lazaret with the router (default profile: Debian, isolation on). The
	// first run prepares and warms; the cold start is measured after.
	lzScript := gitRouteScript("/workspace", n)
	run("lazaret_router", ws, lazaret, "run", "--", "sh", "-c", lzScript)
	noLeftovers(t)
	var cold []float64
	for i := 0; i < n; i++ {
		cold = append(cold, ms(asUser(t, e, ws, lazaret, "run", "--", "true")))
		noLeftovers(t)
	}
	// Bare runsc with a plain bind of the workspace over the same Debian
	// prepared lower.
	var rootfs string
	arts, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "prepared", "pl-*", "rootfs"))
	for _, a := range arts {
		if _, err := os.Stat(filepath.Join(a, "usr", "bin", "git")); err == nil {
			rootfs = a
		}
	}
	if rootfs == "" {
		t.Fatalf("no prepared Debian lower with git among %v", arts)
	}
	// Inside bare runsc the workspace belongs to root of the sandbox, as in
	// Lazaret; nothing else differs.
	process := map[string]any{"args": []string{"/bin/sh", "-c", lzScript}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}, "env": []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "GIT_CONFIG_NOSYSTEM=1"}}
	run("bare_runsc_plain_bind", ws, bareRunscBind(t, e, "bench-git", rootfs, ws, process)...)
	noLeftovers(t)
	// The bound ignored directory against the plain bind, paired. This
	// machine's file-system speed drifts by up to 2x within minutes (the
	// same untar took 0.66-1.7 s in one quarter hour), and the setups above
	// run minutes apart, so their ratio carries that drift. Each pair runs
	// one untar into a new directory in Lazaret and one in bare runsc back
	// to back, in alternating order; nothing is deleted meanwhile. Each
	// untar starts from clean page cache: the previous untar's 5,000 files
	// (and a Lazaret teardown's give-back of the bound directory) are
	// written back by the host's flusher seconds later, in whichever untar
	// runs then, so every member of a pair first waits for sync(2) outside
	// its timed region.
	pairScript := func(dir string) string {
		return fmt.Sprintf(`set -e
cd /workspace; mkdir -p %[1]s
s=$(date +%%s%%N); tar --no-same-owner -xf bench.tar -C %[1]s; e=$(date +%%s%%N); echo "pair $(( (e - s) / 1000 ))"`, dir)
	}
	for i := 0; i < 2*n; i++ {
		lz := func() {
			r, out := benchTimes(t, e, ws, "lazaret_pair", lazaret, "run", "--", "sh", "-c", pairScript(fmt.Sprintf("ignored/pair-lz-%d", i)))
			if len(r["pair"]) != 1 {
				t.Fatalf("lazaret pair %d: %s", i, out)
			}
			results["lazaret_router"]["ignored_paired"] = append(results["lazaret_router"]["ignored_paired"], r["pair"][0])
			// Its teardown (which walks the bound directory) must not
			// overlap the next untar.
			noLeftovers(t)
		}
		bare := func() {
			p := map[string]any{"args": []string{"/bin/sh", "-c", pairScript(fmt.Sprintf("ignored/pair-bare-%d", i))}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}, "env": []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"}}
			r, out := benchTimes(t, e, ws, "bare_pair", bareRunscBind(t, e, fmt.Sprintf("bench-git-pair%d", i), rootfs, ws, p)...)
			if len(r["pair"]) != 1 {
				t.Fatalf("bare pair %d: %s", i, out)
			}
			results["bare_runsc_plain_bind"]["ignored_paired"] = append(results["bare_runsc_plain_bind"]["ignored_paired"], r["pair"][0])
		}
		order := []func(){lz, bare}
		if i%2 == 1 {
			order = []func(){bare, lz}
		}
		for _, f := range order {
			syscall.Sync()
			f()
		}
	}
	noLeftovers(t)
	// The FUSE floor: go-fuse's own loopback filesystem (every request
	// passed straight to the host directory: no routing, no watch, no
	// gVisor) with the router's cache lifetimes and mount options, on the
	// host. What it costs over the host's own figures is the price of the
	// FUSE round trips alone on this machine; set against the plain bind
	// inside gVisor it shows whether the router's targets are reachable by
	// any go-fuse daemon here.
	// The shell enters the mount itself: the child this process forks must
	// not touch a filesystem this process serves (a forked child stopped on
	// a FUSE request while this process's runtime stops the world for a
	// collection deadlocks both).
	// The bare runsc below leaves nothing either: checked once the loopback
	// is unmounted (cleanups run last registered first).
	t.Cleanup(func() { noLeftovers(t) })
	mnt := fuseLoopback(t, ws, e.userDir("bench-git-loopback"))
	run("fuse_floor_host_loopback", ws, "sh", "-c", gitRouteScript(mnt, n))
	// A pass-through FUSE daemon inside gVisor: the same loopback mount
	// bound into bare runsc in place of the workspace. It differs from the
	// plain bind only by FUSE, and from Lazaret's router by doing no
	// routing (no rules, no Domain-state copies, no watch, no
	// re-resolution), though it keeps a file handle per open file where the
	// router keeps none. Set beside the router it shows what the router's
	// own work costs, and beside the plain bind what FUSE in gVisor costs.
	run("fuse_loopback_bare_runsc", ws, bareRunscBind(t, e, "bench-git-fuse", rootfs, mnt, process)...)

	fmt.Printf("\n%-34s %10s %10s %10s %10s   (median ms of %d)\n", "setup", "git status", "untar", "ign. bind", "ign. router", n)
	for _, name := range []string{"host", "fuse_floor_host_loopback", "bare_runsc_plain_bind", "fuse_loopback_bare_runsc", "lazaret_router"} {
		r := results[name]
		fmt.Printf("%-34s %10.1f %10.1f %10.1f %10.1f\n", name, median(r["status"]), median(r["plain"]), median(r["ignored"]), median(r["ignored_router"]))
	}
	b, l := results["bare_runsc_plain_bind"], results["lazaret_router"]
	fmt.Printf("router / plain bind: git status %.2fx (target <= 1.3x), untar %.2fx, untar into an ignored directory served by the router %.2fx\n",
		median(l["status"])/median(b["status"]), median(l["plain"])/median(b["plain"]), median(l["ignored_router"])/median(b["ignored_router"]))
	fmt.Printf("untar into an ignored directory bound from Ignored Workspace State / plain bind: %.2fx in the runs above; paired (%d pairs, medians %.1f / %.1f ms): %.2fx (target <= 1.3x)\n",
		median(l["ignored"])/median(b["ignored"]), len(l["ignored_paired"]), median(l["ignored_paired"]), median(b["ignored_paired"]), median(l["ignored_paired"])/median(b["ignored_paired"]))
	// An untar is one sequence of synchronous calls: inside gVisor a FUSE
	// daemon adds its round trips (the loopback's time over the host's) to
	// what the plain bind costs, so plain bind + that is a lower bound for
	// any go-fuse router there.
	f, h := results["fuse_floor_host_loopback"], results["host"]
	bound := func(k string) float64 {
		return (median(b[k]) + median(f[k]) - median(h[k])) / median(b[k])
	}
	fmt.Printf("FUSE floor (go-fuse loopback on the host, no gVisor, no routing): round trips alone cost untar %.0f ms, untar into ignored %.0f ms over the host; plain bind + that: untar %.2fx, untar into ignored %.2fx (lower bound for any go-fuse router in gVisor)\n",
		median(f["plain"])-median(h["plain"]), median(f["ignored"])-median(h["ignored"]), bound("plain"), bound("ignored"))
	g := results["fuse_loopback_bare_runsc"]
	fmt.Printf("pass-through FUSE inside gVisor (the go-fuse loopback bound into bare runsc) / plain bind: git status %.2fx, untar %.2fx, untar into ignored %.2fx; the router / the loopback: git status %.2fx, untar %.2fx, untar into ignored %.2fx\n",
		median(g["status"])/median(b["status"]), median(g["plain"])/median(b["plain"]), median(g["ignored"])/median(b["ignored"]),
		median(l["status"])/median(g["status"]), median(l["plain"])/median(g["plain"]), median(l["ignored"])/median(g["ignored"]))
	fmt.Printf("cold start in the 5,000-file repository (lazaret run -- true): %.1f ms\n", median(cold))
	rep := map[string]any{"results": results, "cold_ms": cold, "ratios": map[string]float64{
		"git_status_router_vs_plain_bind":          median(l["status"]) / median(b["status"]),
		"untar_router_vs_plain_bind":               median(l["plain"]) / median(b["plain"]),
		"untar_ignored_bound_vs_plain_bind":        median(l["ignored"]) / median(b["ignored"]),
		"untar_ignored_bound_vs_plain_bind_paired": median(l["ignored_paired"]) / median(b["ignored_paired"]),
		"untar_ignored_router_vs_plain_bind":       median(l["ignored_router"]) / median(b["ignored_router"]),
	}}
	if *flagBenchOut != "" {
		js, _ := json.MarshalIndent(rep, "", "  ")
		os.MkdirAll(*flagBenchOut, 0o755)
		os.WriteFile(filepath.Join(*flagBenchOut, "gitroute-latest.json"), js, 0o644)
	}
	recordBench(t, "git_routing", "ms", rep)
}

// fuseLoopback mounts go-fuse's loopback filesystem of dir at mnt (this
// process serves it) with the Git-routing daemon's cache lifetimes and
// mount options; it is unmounted when the test ends.
func fuseLoopback(t *testing.T, dir, mnt string) string {
	root, err := fs.NewLoopbackRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := gitroute.MountOptions(time.Minute) // the lifetime of watched paths
	opts.FsName = "lazaret-bench-loopback"
	srv, err := fs.Mount(mnt, root, opts)
	if err != nil {
		t.Fatalf("mount the go-fuse loopback filesystem (needs /dev/fuse): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return mnt
}
