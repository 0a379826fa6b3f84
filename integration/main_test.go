// Package integration runs the real product — the four binaries, the pinned
// runsc, newuidmap, the kernel — as a non-root test user, and checks that
// nothing is left behind after each scenario. Scenario names follow the
// spec's sections and requirement ids.
//
// The harness runs as root (to create that user's directories and to plant
// marker files outside the workspace); the product never does. Run it with
// `make integration` (which creates the user and builds its images). A
// missing prerequisite fails with the fix in the message; only
// LAZARET_ALLOW_SKIP=1 (a developer's machine, never CI) turns that into a
// skip.
//
// Every scenario records the protocol steps of the Domains it starts in the
// model's vocabulary (LAZARET_MODEL_TRACE) and replays them through the
// model's Next relation when it ends (modeltrace_test.go).
package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	flagUser  = flag.String("user", "lazaret-test", "non-root user that runs the product")
	flagRunsc = flag.String("runsc", "", "pinned runsc binary")
	flagBin   = flag.String("bin", "", "directory with the four built binaries")
	flagBinFP = flag.String("bin-fp", "", "directory with the four binaries built with -tags lazaret_failpoints")
)

// env is the harness's view of the test user and product.
type env struct {
	uid, gid  int
	subStart  int // the user's subordinate uid range [subStart, subStart+65536)
	home      string
	base      string // root of this run's directories (reachable by the user)
	bin       string // copies of the binaries the user can execute
	binFP     string // copies of the failpoint builds ("" if not given)
	stateHome string
	runtime   string
	runsc     string
}

var E *env
var setupErr error

func TestMain(m *testing.M) {
	if cfg := os.Getenv(netServerEnv); cfg != "" {
		runNetServer(cfg) // the network tests' test host, inside its netns
	}
	if cfg := os.Getenv(httpServerEnv); cfg != "" {
		runHTTPServer(cfg) // the identity test's apt repository, inside its netns
	}
	if cfg := os.Getenv(fakeModelEnv); cfg != "" {
		runFakeModel(cfg) // the agent tests' model API, inside its netns
	}
	if cfg := os.Getenv(egressServerEnv); cfg != "" {
		runEgressServer(cfg) // the allowlist tests' named services, inside its netns
	}
	flag.Parse()
	E, setupErr = setup()
	code := m.Run()
	if E != nil && setupErr == nil {
		// The scenarios' own checks are scoped when they run in
		// parallel: at the end nothing at all may be left for the user.
		var left string
		if !waitUntil(10*time.Second, 100*time.Millisecond, func() bool { left = leftovers(E); return left == "" }) {
			fmt.Fprintf(os.Stderr, "FAIL leftovers after all scenarios:\n%s", left)
			if code == 0 {
				code = 1
			}
		}
	}
	if E != nil {
		problems, summary := checkModelTraces()
		fmt.Println(summary)
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "FAIL model trace:", p)
		}
		if len(problems) > 0 && code == 0 {
			code = 1
		}
	}
	if E != nil && code == 0 {
		os.RemoveAll(E.base)
	}
	os.Exit(code)
}

func setup() (*env, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the integration harness must run as root (it runs the product as %s); use `make integration`", *flagUser)
	}
	u, err := user.Lookup(*flagUser)
	if err != nil {
		return nil, fmt.Errorf("test user %s missing: run `scripts/setup.sh user %s` (make integration does)", *flagUser, *flagUser)
	}
	e := &env{home: u.HomeDir, runsc: *flagRunsc}
	e.uid, _ = strconv.Atoi(u.Uid)
	e.gid, _ = strconv.Atoi(u.Gid)
	sub, _ := os.ReadFile("/etc/subuid")
	for _, line := range strings.Split(string(sub), "\n") {
		if f := strings.Split(line, ":"); len(f) == 3 && (f[0] == u.Username || f[0] == u.Uid) {
			e.subStart, _ = strconv.Atoi(f[1])
		}
	}
	if e.subStart == 0 {
		return nil, fmt.Errorf("test user %s has no subordinate uid range: run `scripts/setup.sh user %s`", *flagUser, *flagUser)
	}
	if e.runsc == "" {
		return nil, fmt.Errorf("-runsc not given: run through `make integration`")
	}
	if _, err := os.Stat(e.runsc); err != nil {
		return nil, fmt.Errorf("runsc %s: %v; run `make setup`", e.runsc, err)
	}
	base, err := os.MkdirTemp("/var/tmp", "lazaret-it-")
	if err != nil {
		return nil, err
	}
	os.Chmod(base, 0o755)
	e.base = base
	e.bin = filepath.Join(base, "bin")
	os.Mkdir(e.bin, 0o755)
	src := *flagBin
	if src == "" {
		return nil, fmt.Errorf("-bin not given: run through `make integration`")
	}
	if err := copyBinaries(src, e.bin); err != nil {
		return nil, err
	}
	if *flagBinFP != "" {
		e.binFP = filepath.Join(base, "bin-fp")
		os.Mkdir(e.binFP, 0o755)
		if err := copyBinaries(*flagBinFP, e.binFP); err != nil {
			return nil, err
		}
	}
	e.startModelTraces()
	e.stateHome = e.userDir("state")
	e.runtime = e.userDir("run")
	os.Chmod(e.runtime, 0o700)
	for _, img := range []string{"busybox", "debian"} {
		if _, err := os.Stat(filepath.Join(e.home, ".local/share/lazaret/images", img, "index.json")); err != nil {
			return nil, fmt.Errorf("image %s not built for %s: run `scripts/setup.sh images %s busybox debian` (make integration does)", img, *flagUser, *flagUser)
		}
	}
	return e, nil
}

// copyBinaries copies the binaries the way install(1) (make install) does,
// file to file (copy_file_range): a binary written in one large write can
// sit in the page cache as 2 MiB folios, which the kernel maps whole on a
// fault, and the memory benchmark would then count what an installed
// binary does not cost.
func copyBinaries(src, dst string) error {
	for _, b := range []string{"lazaret", "lazaret-cli", "lazaret-hc", "lazaret-rs", "lazaret-gitroute", "lazaret-escalate", "lazaret-init"} {
		if err := copyFile(filepath.Join(src, b), filepath.Join(dst, b)); err != nil {
			return fmt.Errorf("binary %s: %v; run `make build build-failpoints`", b, err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// userDir creates a directory under base owned by the test user.
func (e *env) userDir(name string) string {
	d := filepath.Join(e.base, name)
	os.MkdirAll(d, 0o755)
	os.Chown(d, e.uid, e.gid)
	return d
}

func need(t *testing.T) *env {
	t.Helper()
	if setupErr != nil {
		if os.Getenv("LAZARET_ALLOW_SKIP") == "1" {
			t.Skipf("LAZARET_ALLOW_SKIP=1: %v", setupErr)
		}
		t.Fatalf("integration prerequisites: %v", setupErr)
	}
	traceFor(t, E)
	return E
}

// needFailpoints is need for a scenario that runs the failpoint build
// (-bin-fp): without it the scenario fails with the fix.
func needFailpoints(t *testing.T) *env {
	t.Helper()
	e := need(t)
	if e.binFP == "" {
		t.Fatal("no failpoint build: run through `make integration` (it passes -bin-fp)")
	}
	return e
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// workspace creates a fresh workspace directory owned by the test user.
func workspace(t *testing.T) string {
	e := need(t)
	ws := e.userDir(filepath.Join("ws", strings.ReplaceAll(t.Name(), "/", "_")+"-"+randHex(3)))
	addWorkspace(traceFor(t, e), ws)
	t.Cleanup(func() {
		if t.Failed() {
			logDomainTails(t, e, ws)
		}
	})
	return ws
}

// logDomainTails logs, for a failed test, the end of hc.log of every
// Domain of workspace ws (RS, the Git-routing daemon and the guest init
// log there too): the state home is removed with the test run, and a
// failure seen only in CI is otherwise left without its logs.
func logDomainTails(t *testing.T, e *env, ws string) {
	const lines = 120
	canon, _ := filepath.EvalSymlinks(ws)
	dirs, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "domain.json"))
		if err != nil || !strings.Contains(string(b), strconv.Quote(canon)) {
			continue
		}
		log, err := os.ReadFile(filepath.Join(d, "hc.log"))
		if err != nil {
			t.Logf("Domain %s: no hc.log: %v", filepath.Base(d), err)
			continue
		}
		all := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
		t.Logf("Domain %s (%s): the last %d of %d lines of hc.log:\n%s", filepath.Base(d), canon, min(lines, len(all)), len(all), strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
}

// result of one lazaret invocation.
type result struct {
	stdout, stderr string
	code           int
}

// cmd builds a lazaret invocation as the test user in dir.
func (e *env) cmd(dir string, extraEnv []string, args ...string) *exec.Cmd {
	return e.cmdWith(e.bin, dir, extraEnv, args...)
}

// cmdWith is cmd with the binaries of bin (e.g. the failpoint build).
func (e *env) cmdWith(bin, dir string, extraEnv []string, args ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(bin, "lazaret"), args...)
	c.Dir = dir
	c.Env = append([]string{
		"HOME=" + e.home, "USER=" + *flagUser, "PATH=/usr/local/bin:/usr/bin:/bin",
		"XDG_STATE_HOME=" + e.stateHome, "XDG_RUNTIME_DIR=" + e.runtime,
		"LAZARET_RUNSC=" + e.runsc, "LANG=C.UTF-8",
	}, extraEnv...)
	c.Env = append(c.Env, modelTraceEnv(dir)...) // later entries win: always this test's trace
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}, Setpgid: true}
	return c
}

// lz runs lazaret and waits; stdin may be nil.
func lz(t *testing.T, dir string, stdin io.Reader, args ...string) result {
	t.Helper()
	return lzEnv(t, dir, nil, stdin, args...)
}

// userConfig writes body as a configuration file of the test user (the
// file `--config` names) and returns its path.
func userConfig(t *testing.T, e *env, body string) string {
	t.Helper()
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, e.uid, e.gid)
	return cfg
}

// lzEnv is lz with extra environment variables (later ones win).
func lzEnv(t *testing.T, dir string, extraEnv []string, stdin io.Reader, args ...string) result {
	t.Helper()
	return lzFor(t, 3*time.Minute, dir, extraEnv, stdin, args...)
}

// lzFor is lzEnv bounded by limit instead of three minutes.
func lzFor(t *testing.T, limit time.Duration, dir string, extraEnv []string, stdin io.Reader, args ...string) result {
	t.Helper()
	e := need(t)
	c := e.cmd(dir, extraEnv, args...)
	var out, errb bytes.Buffer
	c.Stdin, c.Stdout, c.Stderr = stdin, &out, &errb
	done := make(chan error, 1)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- c.Wait() }()
	select {
	case <-done:
	case <-time.After(limit):
		c.Process.Kill()
		<-done
		t.Fatalf("lazaret %v timed out; stderr: %s", args, errb.String())
	}
	return result{out.String(), errb.String(), c.ProcessState.ExitCode()}
}

// noLeftovers asserts (polling briefly: the coordinator finishes tearing
// down after the CLI exits) that nothing of the scenario is left: no
// process of the user or its subordinate ids, no mount under the run's
// directories or the user's state, no runtime directory of any Domain —
// of the scenario's own Domains when it runs in parallel (scope_test.go).
func noLeftovers(t *testing.T) {
	t.Helper()
	e := need(t)
	var last string
	if waitUntil(10*time.Second, 100*time.Millisecond, func() bool { last = leftoversOf(e, t); return last == "" }) {
		return
	}
	t.Errorf("leftovers after the scenario:\n%s", last)
}

// noProcessesOrMounts is noLeftovers without the runtime-directory check.
func noProcessesOrMounts(t *testing.T) {
	t.Helper()
	e := need(t)
	var last string
	if waitUntil(10*time.Second, 100*time.Millisecond, func() bool {
		last = leftoversOf(e, t)
		return last == "" || !strings.Contains(last, "process ") && !strings.Contains(last, "mount: ")
	}) {
		return
	}
	t.Errorf("processes or mounts left:\n%s", last)
}

// leftovers is everything of the test user's product that is left: every
// process of the user or its subordinate ids, every mount under the run's
// directories or the user's home, every Domain runtime directory.
func leftovers(e *env) string { return leftoversIn(e, nil) }

// waitUntil polls cond every interval until it holds or limit passes, and
// reports whether it held: the harness's one way to await a condition it
// can observe but not be told of.
func waitUntil(limit, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// syncBuffer is a buffer a test may read while a child process's output
// is being copied into it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len is the number of bytes written so far.
func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}
