package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/lazaret/lazaret/pkg/guestbin"
	"github.com/lazaret/lazaret/pkg/model/trace"
)

// Scenarios that touch only their own Domains run side by side
// (parallel(t)). Their leftover checks then look only at what belongs to
// them (a scenario's scope): the Domains its trace file names or whose
// stored identity has one of its workspaces; the processes that record
// into its trace or name its workspaces or Domains, with their
// descendants and every process in a user namespace one of those
// entered; the mounts and runtime directories of those paths and Domains.
// A serial scenario runs alone, so its check stays global; TestMain ends
// the run with a global check that nothing at all is left for the user.

var (
	parallelMu    sync.Mutex
	parallelTests = map[string]bool{} // top-level names of parallel scenarios
	wsOwner       = map[string]*modelTrace{}
)

// parallel marks t (a scenario, or a subtest, that touches only its own
// Domains: no gc, no rm --all, no listing of every Domain, no shared
// profile paths, no image builds, no look at every process of the user)
// to run side by side with the others. Call it first, before need(t).
func parallel(t *testing.T) {
	t.Helper()
	parallelMu.Lock()
	parallelTests[t.Name()] = true
	parallelMu.Unlock()
	t.Parallel()
}

// isParallel reports whether test name (or a test it is a subtest of) runs
// in parallel.
func isParallel(name string) bool {
	parallelMu.Lock()
	defer parallelMu.Unlock()
	for n := name; ; {
		if parallelTests[n] {
			return true
		}
		i := strings.LastIndexByte(n, '/')
		if i < 0 {
			return false
		}
		n = n[:i]
	}
}

// addWorkspace makes ws part of mt's scope: lazaret invocations in it record
// into mt's trace and its Domains are mt's.
func addWorkspace(mt *modelTrace, ws string) {
	traceMu.Lock()
	defer traceMu.Unlock()
	mt.workspaces = append(mt.workspaces, ws)
	wsOwner[ws] = mt
}

// ownDir makes dir, a directory the scenario runs lazaret in that
// workspace(t) did not make, part of t's scope.
func ownDir(t *testing.T, dir string) {
	t.Helper()
	addWorkspace(traceFor(t, need(t)), dir)
}

// traceForDir is the trace of the parallel scenario whose workspace holds
// dir (nil if none).
func traceForDir(dir string) *modelTrace {
	traceMu.Lock()
	defer traceMu.Unlock()
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if mt, ok := wsOwner[d]; ok && mt.parallel {
			return mt
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}

// scope is what one scenario (a test with its subtests and parents) owns.
type scope struct {
	traces     []string // trace file paths
	workspaces []string
	domains    map[string]bool
}

// scopeOf collects t's scope from the traces of t's family.
func scopeOf(e *env, t *testing.T) *scope {
	name := t.Name()
	sc := &scope{domains: map[string]bool{}}
	traceMu.Lock()
	for _, mt := range traceAll {
		if mt.test == name || strings.HasPrefix(mt.test, name+"/") || strings.HasPrefix(name, mt.test+"/") {
			sc.traces = append(sc.traces, mt.path)
			sc.workspaces = append(sc.workspaces, mt.workspaces...)
		}
	}
	traceMu.Unlock()
	for _, p := range sc.traces {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		recs, _ := trace.ReadRecords(f)
		f.Close()
		for _, r := range recs {
			if r.Domain != "" {
				sc.domains[r.Domain] = true
			}
		}
	}
	doms, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "domain.json"))
	for _, d := range doms {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		var id struct {
			Workspace string `json:"workspace"`
		}
		if json.Unmarshal(b, &id) == nil && sc.ownsPath(id.Workspace) {
			sc.domains[filepath.Base(filepath.Dir(d))] = true
		}
	}
	return sc
}

// ownsPath reports whether p is (beneath) one of the scope's workspaces.
func (sc *scope) ownsPath(p string) bool {
	if p == "" {
		return false
	}
	for _, ws := range sc.workspaces {
		if p == ws || strings.HasPrefix(p, ws+"/") {
			return true
		}
		if r, err := filepath.EvalSymlinks(ws); err == nil && (p == r || strings.HasPrefix(p, r+"/")) {
			return true
		}
	}
	return false
}

// names reports whether s names one of the scope's workspaces, Domains or
// trace files.
func (sc *scope) names(s string) bool {
	for _, ws := range sc.workspaces {
		if strings.Contains(s, ws) {
			return true
		}
	}
	for id := range sc.domains {
		if strings.Contains(s, id) {
			return true
		}
	}
	for _, p := range sc.traces {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// userProc is one process of the test user or its subordinate ids.
type userProc struct {
	pid, ppid, uid int
	args           []string
	cmdline        string // args joined by spaces
	userns         string
}

func scanUserProcs(e *env) []userProc {
	var out []userProc
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		st, err := os.Stat(p)
		if err != nil {
			continue
		}
		uid := int(st.Sys().(*syscall.Stat_t).Uid)
		if uid != e.uid && (uid < e.subStart || uid >= e.subStart+65536) {
			continue
		}
		cmdline, _ := os.ReadFile(p + "/cmdline")
		if len(cmdline) == 0 {
			continue // a zombie being reaped
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		up := userProc{pid: pid, uid: uid, args: strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00"), cmdline: strings.ReplaceAll(string(cmdline), "\x00", " ")}
		if stat, err := os.ReadFile(p + "/stat"); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
					up.ppid, _ = strconv.Atoi(f[1])
				}
			}
		}
		up.userns, _ = os.Readlink(p + "/ns/user")
		out = append(out, up)
	}
	return out
}

// mine reports whether process pid is identified by the scope directly:
// by its command line, environment or working directory.
func (sc *scope) mine(up userProc) bool {
	if sc.names(up.cmdline) {
		return true
	}
	dir := "/proc/" + strconv.Itoa(up.pid)
	if env, err := os.ReadFile(dir + "/environ"); err == nil {
		for _, kv := range strings.Split(string(env), "\x00") {
			if strings.HasPrefix(kv, "LAZARET_") && sc.names(kv) {
				return true
			}
		}
	}
	if cwd, err := os.Readlink(dir + "/cwd"); err == nil && sc.ownsPath(cwd) {
		return true
	}
	return false
}

// procsIn is the processes of the test user and its subordinate ids that
// belong to sc (nil: all of them).
func procsIn(e *env, sc *scope) []userProc {
	procs := scanUserProcs(e)
	var hostNS string
	if sc != nil {
		hostNS, _ = os.Readlink("/proc/self/ns/user")
		in := map[int]bool{}
		nss := map[string]bool{}
		for _, up := range procs {
			if sc.mine(up) {
				in[up.pid] = true
			}
		}
		for changed := true; changed; {
			changed = false
			for _, up := range procs {
				if in[up.pid] {
					if up.userns != hostNS && !nss[up.userns] {
						nss[up.userns], changed = true, true
					}
					continue
				}
				if in[up.ppid] || nss[up.userns] {
					in[up.pid], changed = true, true
				}
			}
		}
		kept := procs[:0]
		for _, up := range procs {
			if in[up.pid] {
				kept = append(kept, up)
			}
		}
		procs = kept
	}
	return procs
}

// ownProcs is the processes of t's scenario: every process of the test
// user (and its subordinate ids) when t runs alone, its scope's when it
// runs in parallel. A scenario that looks for "its" HC, RS, exec client
// or host command looks here, never at every process of the user.
func ownProcs(e *env, t *testing.T) []userProc {
	if !isParallel(t.Name()) {
		return procsIn(e, nil)
	}
	return procsIn(e, scopeOf(e, t))
}

// leftoversIn is leftovers restricted to sc (nil: everything).
func leftoversIn(e *env, sc *scope) string {
	var b strings.Builder
	procs := procsIn(e, sc)
	for _, up := range procs {
		fmt.Fprintf(&b, "process %d uid %d: %s\n", up.pid, up.uid, up.cmdline)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mi), "\n") {
		if sc == nil && (strings.Contains(line, e.base) || strings.Contains(line, e.home)) || sc != nil && sc.names(line) {
			fmt.Fprintf(&b, "mount: %s\n", line)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(e.runtime, "lazaret"))
	for _, d := range ents {
		if d.Name() == guestbin.Dir {
			continue // the guest binaries' cache is no Domain's (its own scenario checks it)
		}
		if sc == nil || sc.domains[d.Name()] {
			fmt.Fprintf(&b, "runtime dir left: %s\n", d.Name())
		}
	}
	return b.String()
}

// leftoversOf is what is left of t's scenario: everything of the test
// user when t runs alone, its scope's when it runs in parallel.
func leftoversOf(e *env, t *testing.T) string {
	if !isParallel(t.Name()) {
		return leftovers(e)
	}
	return leftoversIn(e, scopeOf(e, t))
}

// TestScopedLeftoversSeeTheWholeDomain checks the scoped leftover check
// itself. It runs alone (serially), so while its Domain runs, everything
// of the test user is that Domain's: the scoped view must show exactly the
// global view (every process, mount and runtime directory is attributed
// to the scenario), the scope of another workspace none of it, and after
// the Domain stopped both views are empty.
func TestScopedLeftoversSeeTheWholeDomain(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	hold := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo up; exec sleep 300")
	out, err := hold.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { hold.Wait(); close(done) }()
	defer func() {
		hold.Process.Signal(syscall.SIGTERM) // the CLI this test started, by its pid
		<-done
	}()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("no ready line: %q %v", line, err)
	}
	global := leftovers(e)
	scoped := leftoversIn(e, scopeOf(e, t))
	for _, want := range []string{"lazaret-hc", "lazaret-rs", "runsc", "runtime dir left: "} {
		if !strings.Contains(scoped, want) {
			t.Errorf("the scoped view lacks %s:\n%s", want, scoped)
		}
	}
	t.Logf("the running Domain, as its scope sees it:\n%s", scoped)
	if scoped != global {
		t.Errorf("with only this scenario running, the scoped view differs from the global one:\nscoped:\n%s\nglobal:\n%s", scoped, global)
	}
	other := &scope{workspaces: []string{filepath.Join(e.base, "ws", "no-such-workspace")}, domains: map[string]bool{}}
	if l := leftoversIn(e, other); l != "" {
		t.Errorf("another workspace's scope sees this Domain:\n%s", l)
	}
	hold.Process.Signal(syscall.SIGTERM)
	<-done
	noLeftovers(t)
	if l := leftoversIn(e, scopeOf(e, t)); l != "" {
		t.Errorf("the scoped view after the stop:\n%s", l)
	}
}
