package integration

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/capability"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/gitroute"
	"github.com/lazaret/lazaret/pkg/proc"
)

// TestRunExitStatus: `lazaret run -- CMD` exits with CMD's status, 128+n for
// a signal, 127/126 for a command that cannot run (DX-5).
func TestRunExitStatus(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	recordModelTrace(t)
	// A file of the workspace without the execute bit, and one that is
	// not an executable format. The cases that cannot run use a second
	// workspace (the model holds 8 sessions per Domain).
	ws2 := workspace(t)
	os.WriteFile(filepath.Join(ws2, "noexec.sh"), []byte("#!/bin/sh\necho ran\n"), 0o644)
	os.WriteFile(filepath.Join(ws2, "blob"), []byte("not a program\x00\x01"), 0o755)
	for _, c := range []struct {
		cmd    []string
		want   int
		stderr string // exact, when set
	}{
		{[]string{"true"}, 0, ""},
		{[]string{"false"}, 1, ""},
		{[]string{"sh", "-c", "exit 7"}, 7, ""},
		{[]string{"sh", "-c", "kill -TERM $$"}, 143, ""},
		{[]string{"no-such-command-xyz"}, 127, "lazaret: no-such-command-xyz: command not found in the sandbox\n"},
		{[]string{"/no/such/path"}, 127, "lazaret: /no/such/path: command not found in the sandbox\n"},
		{[]string{"/etc/passwd"}, 126, "lazaret: /etc/passwd: permission denied\n"},
		{[]string{"./noexec.sh"}, 126, "lazaret: ./noexec.sh: permission denied\n"},
		{[]string{"./blob"}, 126, ""},
		{[]string{"/tmp"}, 126, ""},
	} {
		dir := ws
		if c.want >= 126 && c.want <= 127 {
			dir = ws2
		}
		r := lz(t, dir, nil, append([]string{"run", "-p", "tiny", "--"}, c.cmd...)...)
		if r.code != c.want {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.cmd, r.code, c.want, r.stderr)
		}
		if c.stderr != "" && r.stderr != c.stderr {
			t.Errorf("%v: stderr %q, want %q", c.cmd, r.stderr, c.stderr)
		}
		if (c.want == 126 || c.want == 127) && (!strings.HasPrefix(r.stderr, "lazaret: ") || strings.Contains(r.stderr, "runsc") || strings.Contains(r.stderr, "executing")) {
			t.Errorf("%v: stderr %q is not the product's one-line message", c.cmd, r.stderr)
		}
	}
	noLeftovers(t)
}

// TestLauncherGOMAXPROCS: lazaret-init starts with GOMAXPROCS=1 as the
// guest init and as the session launcher (a Go start in gVisor is much
// cheaper with one P), and a session's command gets exactly the
// profile's environment: no GOMAXPROCS unless the profile sets one, then
// that value.
func TestLauncherGOMAXPROCS(t *testing.T) {
	parallel(t)
	e := need(t)
	recordModelTrace(t)
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	body := `[profiles.procs]
image = "busybox"
env = { GOMAXPROCS = "3" }
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chown(cfg, e.uid, e.gid)
	script := `echo "session=${GOMAXPROCS-unset}"; tr '\0' '\n' </proc/1/environ | grep '^GOMAXPROCS='`
	r := lz(t, workspace(t), nil, "run", "-p", "tiny", "--", "sh", "-c", script)
	if r.code != 0 || r.stdout != "session=unset\nGOMAXPROCS=1\n" {
		t.Errorf("tiny: exit %d, stdout %q (want the session without GOMAXPROCS, the init with 1); stderr %q", r.code, r.stdout, r.stderr)
	}
	r = lz(t, workspace(t), nil, "run", "--config", cfg, "-p", "procs", "--", "sh", "-c", script)
	if r.code != 0 || r.stdout != "session=3\nGOMAXPROCS=1\n" {
		t.Errorf("profile env GOMAXPROCS=3: exit %d, stdout %q (want the session with 3, the init with 1); stderr %q", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t)
}

// TestStderrGate: a non-interactive session's stderr is held only until
// the command is launched: what the command writes at once, a lot of it,
// or text that looks like runsc's launch report with runsc's status, is
// relayed exactly and keeps the command's status.
func TestStderrGate(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	recordModelTrace(t)
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo at-once >&2; exit 3")
	if r.code != 3 || r.stderr != "at-once\n" {
		t.Errorf("immediate stderr: %d %q", r.code, r.stderr)
	}
	fake := `executing processes for container: executing command "x" in sandbox: failed to load x: no such file or directory`
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo '"+fake+"' >&2; exit 128")
	if r.code != 128 || r.stderr != fake+"\n" {
		t.Errorf("command's own runsc-like report rewritten: %d %q", r.code, r.stderr)
	}
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "head -c 300000 /dev/zero | tr '\\0' e >&2; echo done")
	if r.code != 0 || r.stdout != "done\n" || r.stderr != strings.Repeat("e", 300000) {
		t.Errorf("300000 bytes of stderr: code %d stdout %q, %d bytes of stderr", r.code, r.stdout, len(r.stderr))
	}
	noLeftovers(t)
}

// TestRunStdio: stdin, stdout and stderr are relayed separately and exactly
// for non-interactive use.
func TestRunStdio(t *testing.T) {
	parallel(t)
	ws := workspace(t)
	r := lz(t, ws, strings.NewReader("hi\n"), "run", "-p", "tiny", "--", "cat")
	if r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("echo hi | cat: %+v", r)
	}
	r = lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo out; echo err >&2")
	if r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("streams mixed: %+v", r)
	}
	// 4 MiB of binary data through the sandbox and back, checksummed.
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	r = lz(t, ws, bytes.NewReader(data), "run", "-p", "tiny", "--", "cat")
	if r.code != 0 || r.stdout != string(data) {
		t.Fatalf("4 MiB round trip: code %d, %d bytes back", r.code, len(r.stdout))
	}
	// A command that does not read stdin is not blocked by it.
	r = lz(t, ws, bytes.NewReader(data), "run", "-p", "tiny", "--", "true")
	if r.code != 0 {
		t.Fatalf("true with unread stdin: %+v", r)
	}
	noLeftovers(t)
}

// TestCallerDescriptorsStayWithTheCLI: a descriptor the developer's shell
// or harness left open in `lazaret run` (here descriptor 10, a file) is
// held by no process the CLI starts — not the Host Coordinator, which
// outlives the CLI, the Runtime Supervisor, the Git-routing daemon, runsc
// or the sandbox — so it is closed when the CLI exits, and a pipe's reader
// sees its end.
func TestCallerDescriptorsStayWithTheCLI(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := filepath.Join(e.userDir("caller-fd"), "marker-"+randHex(4))
	f, err := os.Create(marker)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo up; read x; exit 0")
	c.ExtraFiles = []*os.File{nil, nil, nil, nil, nil, nil, nil, f} // descriptor 10
	stdin, _ := c.StdinPipe()
	stdout, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 3)
	if _, err := io.ReadFull(stdout, line); err != nil {
		t.Fatalf("session: %v", err)
	}
	holders := map[string]bool{}
	for _, up := range ownProcs(e, t) {
		if up.pid == c.Process.Pid {
			continue
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", up.pid))
		for _, fd := range fds {
			if l, _ := os.Readlink(fd); l == marker {
				holders[fmt.Sprintf("%d %s (%s)", up.pid, up.cmdline, filepath.Base(fd))] = true
			}
		}
	}
	if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/10", c.Process.Pid)); l != marker {
		t.Errorf("the CLI's descriptor 10 is %q, not the marker: the check proves nothing", l)
	}
	for h := range holders {
		t.Errorf("a process the CLI started holds the caller's descriptor: %s", h)
	}
	stdin.Close()
	if err := c.Wait(); err != nil {
		t.Errorf("session: %v", err)
	}
	noLeftovers(t)
}

// TestWorkspaceBidirectional (spec §3.4, FR-3): the project is at /workspace,
// edits are visible both ways at once, files created inside belong to the
// developer on the host, and the command runs in the matching subdirectory.
func TestWorkspaceBidirectional(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	hostGit(t, ws, "init", "-q") // the workspace is the repository's top level
	sub := filepath.Join(ws, "src", "pkg")
	os.MkdirAll(sub, 0o755)
	os.Chown(filepath.Join(ws, "src"), e.uid, e.gid)
	os.Chown(sub, e.uid, e.gid)
	os.WriteFile(filepath.Join(ws, "from-host.txt"), []byte("host says hi\n"), 0o644)
	os.Chown(filepath.Join(ws, "from-host.txt"), e.uid, e.gid)
	r := lz(t, sub, nil, "run", "-p", "tiny", "--", "sh", "-c",
		"pwd; cat /workspace/from-host.txt; echo sandbox says hi > made-inside.txt; mkdir -p /workspace/newdir; echo edited >> /workspace/from-host.txt")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	if !strings.HasPrefix(r.stdout, "/workspace/src/pkg\nhost says hi\n") {
		t.Fatalf("cwd or host file not seen inside: %q", r.stdout)
	}
	made := filepath.Join(sub, "made-inside.txt")
	b, err := os.ReadFile(made)
	if err != nil || string(b) != "sandbox says hi\n" {
		t.Fatalf("file made inside not on host: %q %v", b, err)
	}
	for _, p := range []string{made, filepath.Join(ws, "newdir")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != e.uid {
			t.Errorf("%s owned by uid %d on the host, want the developer %d", p, uid, e.uid)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "from-host.txt")); string(b) != "host says hi\nedited\n" {
		t.Errorf("edit inside not on host: %q", b)
	}
	noLeftovers(t)
}

// TestGitCommitInside (DX-3): git status and commit inside the sandbox, with
// the developer's identity, seen by the host's git at once.
func TestGitCommitInside(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	git := func(args ...string) string { t.Helper(); return hostGit(t, ws, args...) }
	git("init", "-q", "-b", "main")
	git("config", "user.name", "Dev Eloper")
	git("config", "user.email", "dev@example.invalid")
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\n"), 0o644)
	os.Chown(filepath.Join(ws, "a.txt"), e.uid, e.gid)
	git("add", "a.txt")
	git("commit", "-qm", "first")
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("two\n"), 0o644)
	r := lz(t, ws, nil, "run", "--", "sh", "-c", "git status --short && git commit -qam 'from the sandbox' && git log --format='%an <%ae> %s' -1")
	if r.code != 0 {
		t.Fatalf("git inside: %+v", r)
	}
	if !strings.Contains(r.stdout, " M a.txt") {
		t.Errorf("git status inside: %q", r.stdout)
	}
	if got := git("log", "--format=%an <%ae> %s", "-1"); got != "Dev Eloper <dev@example.invalid> from the sandbox" {
		t.Errorf("host sees %q", got)
	}
	if got := git("status", "--porcelain"); got != "" {
		t.Errorf("host work tree not clean after the commit inside: %q", got)
	}
	noLeftovers(t)
}

// TestHostPathsInvisible (SR-3): no host path outside the workspace and the
// read-only control mount is visible; the mount table inside names only
// those host sources.
func TestHostPathsInvisible(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	var planted []string
	for _, dir := range []string{"/etc", e.home, "/tmp", "/run", "/var/tmp"} {
		p := filepath.Join(dir, marker)
		if err := os.WriteFile(p, []byte(marker), 0o644); err != nil {
			t.Fatal(err)
		}
		planted = append(planted, p)
		t.Cleanup(func() { os.Remove(p) })
	}
	script := fmt.Sprintf(`for p in %s; do if cat "$p" 2>/dev/null; then echo "VISIBLE $p"; fi; done
find / -path /proc -prune -o -path /sys -prune -o -name '%s' -print 2>/dev/null | sed 's/^/FOUND /'
cat /proc/self/mountinfo`, strings.Join(planted, " "), marker)
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(line, "VISIBLE") || strings.HasPrefix(line, "FOUND") || strings.Contains(line, marker) && !strings.Contains(line, "mountinfo") {
			t.Errorf("host path reachable inside: %s", line)
		}
	}
	// Host-backed (9p gofer) mounts are exactly the workspace, the
	// read-only control directory, the generation's three name-service
	// files (single files from the runtime directory), the noexec escalation
	// request directory and the State Anchors
	// (§3.5); the root is the overlay over the prepared lower; everything
	// else is a virtual filesystem.
	anchored := map[string]bool{}
	for _, p := range config.DefaultPersistentPaths {
		anchored[p] = true
	}
	virtual := map[string]bool{"tmpfs": true, "proc": true, "sysfs": true, "devpts": true, "dev": true, "mqueue": true, "cgroup": true}
	n := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 1 {
			continue
		}
		n++
		point, opts, fstype := f[4], f[5], g[0]
		switch {
		case fstype == "9p" && point == "/workspace":
		case fstype == "9p" && (point == "/etc/resolv.conf" || point == "/etc/hosts" || point == "/etc/hostname"):
		case fstype == "9p" && point == "/.lazaret/mailbox/requests" && strings.Contains(opts, "noexec"):
			// The escalation request directory: the one writable control mount.
		case fstype == "9p" && (point == "/.lazaret" || strings.HasPrefix(point, "/.lazaret/")) && strings.HasPrefix(opts, "ro"):
		case fstype == "overlay" && point == "/":
		case fstype == "9p" && anchored[point]: // State Anchors (§3.5), over the prepared lower only
		case virtual[fstype]:
		default:
			t.Errorf("unexpected mount inside: %s", line)
		}
	}
	if n == 0 {
		t.Errorf("no mountinfo read inside: %q", r.stdout)
	}
	noLeftovers(t)
}

// TestSandboxPrivileges (SR-1, SR-5): CAP_NET_ADMIN and CAP_NET_RAW are
// absent and no_new_privs is set for guest processes; the guest is uid 0;
// the Runtime Supervisor holds no CAP_NET_ADMIN on any thread once the
// sandbox is published.
func TestSandboxPrivileges(t *testing.T) {
	e := need(t)
	ws := workspace(t)
	hold := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo up; sleep 30")
	stdout, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if _, err := stdout.Read(buf); err != nil {
		t.Fatal(err)
	}
	// Each Runtime Supervisor process by role: the supervisor keeps what
	// teardown needs but no CAP_NET_ADMIN; the Git-routing daemon, which
	// serves requests the sandbox drives, holds nothing but its file
	// permission overrides (no CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETUID…).
	roles := lazaretRSRoles(t, e.uid)
	if len(roles["rs"]) != 1 || len(roles["git-routing"]) != 1 {
		t.Errorf("Runtime Supervisor processes by role: %v, want one supervisor and one Git-routing daemon", roles)
	}
	for _, rs := range roles["rs"] {
		if held, err := capability.ThreadsHold(rs, unix.CAP_NET_ADMIN); err != nil || held {
			t.Errorf("runtime supervisor %d holds CAP_NET_ADMIN after publication (%v)", rs, err)
		}
	}
	for _, daemon := range roles["git-routing"] {
		// It runs from lazaret-gitroute, the smallest binary that hosts
		// the role: its start is on the critical path of every cold start.
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", daemon)); err != nil || filepath.Base(exe) != "lazaret-gitroute" {
			t.Errorf("Git-routing daemon %d runs from %q (%v), want lazaret-gitroute", daemon, exe, err)
		}
		if held, nnp, err := capability.Beyond(daemon, gitroute.FileCapabilities); err != nil || len(held) != 0 || !nnp {
			t.Errorf("Git-routing daemon %d: capabilities beyond its file permission overrides %v, no_new_privs on every thread %v (%v); want none and true", daemon, held, nnp, err)
		}
	}
	hold.Process.Signal(syscall.SIGTERM)
	hold.Wait()
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "id -u; grep -E '^(CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status")
	if r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if lines[0] != "0" {
		t.Errorf("guest uid %q, want 0", lines[0])
	}
	fields := map[string]string{}
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ":")
		fields[k] = strings.TrimSpace(v)
	}
	if fields["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q", fields["NoNewPrivs"])
	}
	for _, k := range []string{"CapEff", "CapBnd", "CapAmb"} {
		v, err := strconv.ParseUint(fields[k], 16, 64)
		if err != nil {
			t.Fatalf("%s = %q", k, fields[k])
		}
		if v&(1<<12) != 0 || v&(1<<13) != 0 {
			t.Errorf("%s %#x includes CAP_NET_ADMIN or CAP_NET_RAW", k, v)
		}
	}
	noLeftovers(t)
}

// TestConcurrentSessionsShareOneCoordinator (spec §3.2): a second run in the
// same Domain joins the running generation rather than starting another
// Host Coordinator; both exit with their own status.
func TestConcurrentSessionsShareOneCoordinator(t *testing.T) {
	parallel(t)
	recordModelTrace(t)
	e := need(t)
	ws := workspace(t)
	first := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo first; sleep 3; exit 3")
	var out1 bytes.Buffer
	stdout, _ := first.StdoutPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// Join once the first command runs (the Domain is published), however
	// long the start took on a loaded machine.
	line := make([]byte, 6)
	if _, err := io.ReadFull(stdout, line); err != nil {
		t.Fatalf("first session: %v", err)
	}
	out1.Write(line)
	done := make(chan struct{})
	go func() { io.Copy(&out1, stdout); close(done) }()
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo second; exit 4")
	<-done
	first.Wait()
	if r.code != 4 || r.stdout != "second\n" {
		t.Errorf("second session: %+v", r)
	}
	if first.ProcessState.ExitCode() != 3 || out1.String() != "first\n" {
		t.Errorf("first session: exit %d %q", first.ProcessState.ExitCode(), out1.String())
	}
	logs, _ := filepath.Glob(filepath.Join(e.stateHome, "lazaret", "domains", "*", "hc.log"))
	joined := false
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if strings.Contains(string(b), "workspace="+ws) {
			if n := strings.Count(string(b), "host coordinator started"); n != 1 {
				t.Errorf("%d coordinators started for one Domain", n)
			}
			joined = strings.Contains(string(b), "joined=true")
		}
	}
	if !joined {
		t.Errorf("the second session did not join the running generation")
	}
	noLeftovers(t)
}

// TestSignalsReachTheCommand: SIGINT/SIGTERM to the CLI are delivered to the
// command, whose status becomes the CLI's; the Domain then tears down.
func TestSignalsReachTheCommand(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	c := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", `trap 'echo got INT; exit 3' INT; echo ready; while :; do sleep 1; done`)
	stdout, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("no ready line: %q %v", buf, err)
	}
	c.Process.Signal(syscall.SIGINT)
	rest := new(bytes.Buffer)
	rest.ReadFrom(stdout)
	c.Wait()
	if c.ProcessState.ExitCode() != 3 || !strings.Contains(rest.String(), "got INT") {
		t.Errorf("after SIGINT: exit %d, output %q", c.ProcessState.ExitCode(), rest.String())
	}
	noLeftovers(t)
}

// TestSupervisorLossTearsDown (spec §3.3 hard loss): killing
// the Runtime Supervisor takes down the attached runsc, the sandbox and the
// session; the next run starts cleanly.
func TestSupervisorLossTearsDown(t *testing.T) {
	parallel(t)
	for _, victim := range []string{"lazaret-rs", "lazaret-hc"} {
		t.Run(victim, func(t *testing.T) {
			t.Parallel()
			recordModelTrace(t)
			e := need(t)
			ws := workspace(t)
			c := e.cmd(ws, nil, "run", "-p", "tiny", "--", "sh", "-c", "echo ready; sleep 60")
			stdout, _ := c.StdoutPipe()
			var stderr bytes.Buffer
			c.Stderr = &stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 6)
			if _, err := stdout.Read(buf); err != nil {
				t.Fatalf("no ready line: %v", err)
			}
			pid := findProcess(t, victim)
			helpers := helperProcesses(t)
			if len(helpers) != 1 {
				t.Fatalf("connectivity helpers before the kill: %v, want one slirp4netns", helpers)
			}
			syscall.Kill(pid, syscall.SIGKILL) // a process this test started, by its pid
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				c.Process.Kill()
				t.Fatalf("CLI did not end after %s was killed", victim)
			}
			if c.ProcessState.ExitCode() == 0 {
				t.Errorf("CLI exited 0 after %s loss", victim)
			}
			// Processes and mounts go at once; after Host Coordinator loss
			// its runtime directory waits for the next invocation's recovery.
			noProcessesOrMounts(t)
			if h := helperProcesses(t); len(h) != 0 {
				t.Errorf("connectivity helper %v outlived the %s kill", h, victim)
			}
			if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "again"); r.code != 0 || r.stdout != "again\n" {
				t.Errorf("next run after %s loss: %+v", victim, r)
			}
			noLeftovers(t)
		})
	}
}

// userProcesses lists uid's processes whose argv[0] has base name name,
// with their argv.
func userProcesses(uid int, name string) map[int][]string {
	out := map[int][]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		st, err := os.Stat(p)
		if err != nil || int(st.Sys().(*syscall.Stat_t).Uid) != uid {
			continue
		}
		cmdline, _ := os.ReadFile(p + "/cmdline")
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != name {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		out[pid] = args
	}
	return out
}

// lazaretRSRoles lists uid's Runtime Supervisor processes by role: "rs"
// for the Runtime Supervisor itself (lazaret-rs), "git-routing" for the
// Git-routing daemon (argv[1] is its role argument; RS runs it from
// lazaret-gitroute, or from lazaret-rs when it cannot exec that), and
// argv[1] for any other hidden role of these binaries (the egress proxy).
// The Host Coordinator itself (lazaret-hc without a hidden role) and the
// CLIs (lazaret without one) are not listed.
func lazaretRSRoles(t *testing.T, uid int) map[string][]int {
	t.Helper()
	roles := map[string][]int{}
	for _, exe := range []string{"lazaret-rs", "lazaret-hc", "lazaret-gitroute", "lazaret"} {
		for pid, args := range userProcesses(uid, exe) {
			role := "rs"
			if hidden, ok := hiddenRole(args); ok {
				role = "__lazaret-" + hidden
				if role == gitroute.DaemonArg {
					role = "git-routing"
				}
			} else if exe != "lazaret-rs" {
				continue
			}
			roles[role] = append(roles[role], pid)
		}
	}
	return roles
}

// findProcess is the scenario's own (ownProcs) oldest-started (lowest
// pid) process of the test user named name, not counting hidden roles
// (hiddenRole, e.g. lazaret-hc's Git-routing daemon).
func findProcess(t *testing.T, name string) int {
	t.Helper()
	e := need(t)
	lowest := 0
	for _, up := range ownProcs(e, t) {
		if _, ok := hiddenRole(up.args); ok {
			continue
		}
		if up.uid == e.uid && len(up.args) > 0 && filepath.Base(up.args[0]) == name && (lowest == 0 || up.pid < lowest) {
			lowest = up.pid
		}
	}
	if lowest == 0 {
		t.Fatalf("no %s process of uid %d in the scenario", name, e.uid)
	}
	return lowest
}

// TestActionableErrors (DX-5): bad input and missing prerequisites produce an
// error naming the fix, exit 2 (a usage error) or 125, and leave nothing
// behind; a start that fails names its log.
func TestActionableErrors(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	// A directory the developer may enter but not list (root's, 0711).
	locked := filepath.Join(filepath.Dir(ws), filepath.Base(ws)+"-locked")
	if err := os.Mkdir(locked, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(locked) })
	cases := []struct {
		name  string
		env   []string
		args  []string
		dir   string
		code  int
		match string
	}{
		{"unknown profile", nil, []string{"run", "-p", "nope", "--", "true"}, ws, 2, `unknown profile "nope"`},
		{"not a directory", nil, []string{"run", "-C", "/etc/passwd", "--", "true"}, ws, 2, "not a directory: run lazaret inside a project directory, or pass one with -C"},
		{"missing start directory", nil, []string{"run", "-C", ws + "/nope", "--", "true"}, ws, 2, "the start directory " + ws + "/nope does not exist: run lazaret inside a project directory, or pass one with -C"},
		{"workspace the developer cannot list", nil, []string{"run", "-p", "tiny", "-C", locked, "--", "true"}, ws, 2, "the Agent Workspace " + locked + " cannot be read and entered by you"},
		{"no command", nil, []string{"run"}, ws, 2, "no command given"},
		{"missing runsc", []string{"LAZARET_RUNSC=/nonexistent/runsc"}, []string{"run", "-p", "tiny", "--", "true"}, ws, 125, "LAZARET_RUNSC=/nonexistent/runsc is not an executable"},
		{"home as workspace", nil, []string{"run", "-p", "tiny", "-C", e.home, "--", "true"}, ws, 125, "refusing your home directory"},
		// A start that fails says where its log is and how to read it.
		{"runsc that is not runsc", []string{"LAZARET_RUNSC=/bin/true"}, []string{"run", "-p", "tiny", "--", "true"}, ws, 125, "the sandbox exited before its init was ready; its log: `lazaret logs -p tiny` (" + e.stateHome},
		{"unknown command", nil, []string{"statu"}, ws, 2, "`lazaret` has no command \"statu\"; did you mean `lazaret status`?"},
		{"unknown option", nil, []string{"run", "-p", "tiny", "--lingr", "5m", "--", "true"}, ws, 2, "`lazaret run` has no option --lingr; did you mean --linger?"},
		{"option without its value", nil, []string{"run", "-p"}, ws, 2, "`lazaret run`: option -p needs a value"},
		// A command line a session request cannot carry: refused before any
		// Domain starts (noLeftovers below), not retried.
		{"command line over a megabyte", nil, append([]string{"run", "-p", "tiny", "--", "true"}, slices.Repeat([]string{strings.Repeat("a", 100_000)}, 15)...), ws, 2, "more than a session request carries (1024 KiB): pass large data in a file in the workspace or on standard input"},
	}
	for _, c := range cases {
		cmd := e.cmd(c.dir, c.env, c.args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Run()
		if cmd.ProcessState.ExitCode() != c.code || !strings.Contains(out.String(), c.match) {
			t.Errorf("%s: exit %d, output %q; want %d and %q", c.name, cmd.ProcessState.ExitCode(), out.String(), c.code, c.match)
		}
	}
	// As root: refused with the fix.
	root := exec.Command(filepath.Join(e.bin, "lazaret"), "run", "--", "true")
	root.Dir = ws
	out, _ := root.CombinedOutput()
	if root.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "refusing to run as root") {
		t.Errorf("as root: %d %q", root.ProcessState.ExitCode(), out)
	}
	// A user without subordinate ids (nobody): refused with the usermod fix.
	nobody := exec.Command(filepath.Join(e.bin, "lazaret"), "run", "-p", "tiny", "--", "true")
	nobody.Dir = "/"
	nobody.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin"}
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ = nobody.CombinedOutput()
	if nobody.ProcessState.ExitCode() != 125 || !strings.Contains(string(out), "usermod --add-subuids") {
		t.Errorf("without subuids: %d %q", nobody.ProcessState.ExitCode(), out)
	}
	noLeftovers(t)
}

// hostGit runs git on the host as the developer in dir.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	e := need(t)
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = []string{"HOME=" + e.home, "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("host git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestDoctor: `lazaret doctor` passes on this (the CI) machine for the test
// user, and --json reports every check.
func TestDoctor(t *testing.T) {
	ws := workspace(t)
	r := lz(t, ws, nil, "doctor")
	if r.code != 0 || strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("doctor: %+v", r)
	}
	r = lz(t, ws, nil, "doctor", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"check": "kernel"`) {
		t.Fatalf("doctor --json: %+v", r)
	}
}

// TestDX5StandbyCoordinatorOnlyForAStart: a run whose Domain is not
// running starts its coordinator's process ahead of its host checks
// (package hcstandby; the timing trace shows it, TestDX5TimingTrace), and
// no other run does: one that joins the running Domain starts none, and
// one refused after reading its profile ends the one it started — nothing
// is left behind, and the refusal is the run's own.
func TestDX5StandbyCoordinatorOnlyForAStart(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	timed := []string{"LAZARET_DEBUG=timing"}
	// Refused after the look-ahead: a user the profile does not run as.
	r := lzEnv(t, ws, timed, nil, "run", "-p", "tiny", "--user", "nobody-here", "--", "true")
	if r.code != 2 || !strings.Contains(r.stderr, `--user "nobody-here"`) {
		t.Fatalf("a run with an unknown --user: %+v", r)
	}
	if !strings.Contains(r.stderr, "coordinator process started ahead") {
		t.Errorf("the refused run started no standby coordinator, so this scenario tests nothing; stages:\n%s", r.stderr)
	}
	noLeftovers(t)
	hold := holdDomain(t, e, ws)
	defer release(hold)
	r = lzEnv(t, ws, timed, nil, "run", "-p", "tiny", "--", "echo", "joined")
	if r.code != 0 || r.stdout != "joined\n" {
		t.Fatalf("join: %+v", r)
	}
	if strings.Contains(r.stderr, "coordinator process started ahead") || strings.Contains(r.stderr, "starting the coordinator") {
		t.Errorf("a run that joins a running Domain started a coordinator; stages:\n%s", r.stderr)
	}
	release(hold)
	noLeftovers(t)
}

// TestDX5TimingTrace: LAZARET_DEBUG=timing prints the start-up stages of
// the CLI, the Host Coordinator and the Runtime Supervisor in time order
// after the command's own output, removes its trace file, and does not
// turn on debug logging.
func TestDX5TimingTrace(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	r := lzEnv(t, ws, []string{"LAZARET_DEBUG=timing"}, nil, "run", "-p", "tiny", "--", "echo", "timed-out-put")
	if r.code != 0 || r.stdout != "timed-out-put\n" {
		t.Fatalf("run: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	want := []string{"cli lazaret run started", "cli coordinator process started ahead", "cli starting the coordinator", "hc coordinator started", "hc store open", "hc recovery done",
		"hc generation recorded", "hc starting the runtime supervisor", "rs supervisor started", "hc runtime supervisor hello verified",
		"hc lease requested", "rs lease recorded by the coordinator",
		"rs State Anchors mounted", "rs starting runsc",
		"rs runsc ready (sandbox init running)", "hc sandbox ready", "hc Domain published", "hc session admitted; starting it in the sandbox's init",
		"cli session accepted", "hc session command exited", "cli exit status received", "cli lazaret run exits"}
	var got []string
	last := -1.0
	for _, line := range strings.Split(r.stderr, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		at, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if at < last {
			t.Errorf("stage %q at %.1f ms before the previous one (%.1f ms)", line, at, last)
		}
		last = at
		got = append(got, f[2]+" "+strings.Join(f[3:], " "))
	}
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("stage %q missing or out of order; table:\n%s", want[i], r.stderr)
	}
	// The Git-routing daemon's stages run beside the lease and the State
	// Anchors: each is in the table, and the mount precedes runsc.
	at := func(stage string) int {
		for k, g := range got {
			if g == stage {
				return k
			}
		}
		t.Errorf("stage %q missing; table:\n%s", stage, r.stderr)
		return -1
	}
	if started, mounted, runsc := at("git-routing Git-routing daemon started"), at("git-routing Git-routing filesystem mounted"), at("rs starting runsc"); started > mounted || mounted > runsc {
		t.Errorf("the Git-routing daemon's stages are out of order; table:\n%s", r.stderr)
	}
	// RS holds the lower while the coordinator verifies its hello, and
	// names it as soon as it holds it, usually before it reads
	// StartSandbox: the lease is requested after the early hold, and RS's
	// check of the lower against StartSandbox ("prepared lower held")
	// precedes the mounts but not necessarily the request.
	if early, requested, held, recorded := at("rs prepared lower held early"), at("hc lease requested"), at("rs prepared lower held"), at("rs lease recorded by the coordinator"); early > requested || requested > recorded || held > recorded {
		t.Errorf("the prepared lower's stages are out of order; table:\n%s", r.stderr)
	}
	// The lease's intent and catalog insertion: taken ahead when the
	// Storage Catalog's verdict names the image's prepared lower (the
	// Storage Catalog locked and opened, then the intent committed and
	// the lease inserted), else on RS's request (the catalog locked and
	// opened while the intent commits, both between the request and the
	// insertion); either before RS hears the lease recorded.
	ahead := slices.Contains(got, "hc lease inserted into the Storage Catalog ahead")
	if ahead {
		opened, intent, inserted := at("hc Storage Catalog locked and open ahead"), at("hc lease intent recorded ahead"), at("hc lease inserted into the Storage Catalog ahead")
		if opened > intent || intent > inserted || inserted > at("rs lease recorded by the coordinator") {
			t.Errorf("the stages of the lease taken ahead are out of order; table:\n%s", r.stderr)
		}
	} else {
		inserted := at("hc lease inserted into the Storage Catalog")
		for _, stage := range []string{"hc lease intent recorded", "hc Storage Catalog locked and open"} {
			if k := at(stage); k < at("hc lease requested") || k > inserted {
				t.Errorf("stage %q is not between the lease's request and its insertion; table:\n%s", stage, r.stderr)
			}
		}
		if inserted > at("rs lease recorded by the coordinator") {
			t.Errorf("the lease is recorded for RS before its insertion; table:\n%s", r.stderr)
		}
	}
	// The coordinator sends Accepted before it asks the init to start the
	// command (the CLI may retry only before the command can run), so the
	// CLI's "session accepted" and the coordinator's "session started" are
	// not ordered; each follows the admission and precedes the exit.
	if admitted, started, exited := at("hc session admitted; starting it in the sandbox's init"), at("hc session started"), at("hc session command exited"); admitted > started || started > exited {
		t.Errorf("the coordinator's session stages are out of order; table:\n%s", r.stderr)
	}
	if traces, _ := filepath.Glob(filepath.Join(os.TempDir(), "lazaret-timing-*.jsonl")); len(traces) > 0 {
		for _, p := range traces {
			if st, err := os.Stat(p); err == nil && st.Sys().(*syscall.Stat_t).Uid == uint32(e.uid) {
				t.Errorf("trace file left: %s", p)
			}
		}
	}
	// Only this scenario's Domain: a parallel one may run with
	// LAZARET_DEBUG=1 (TestSpec32TeardownRecordsDeclaredTransitions).
	l := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")), "hc.log")
	if b, err := os.ReadFile(l); err != nil {
		t.Errorf("read this Domain's log: %v", err)
	} else if strings.Contains(string(b), "level=DEBUG") {
		t.Errorf("LAZARET_DEBUG=timing turned on debug logging in %s", l)
	}
	noLeftovers(t)
}

// hiddenRole is the hidden role a Lazaret process's command line names
// (argv[1] "__lazaret-…", e.g. the Git-routing daemon), without that
// prefix. The Runtime Supervisor runs with the command line of its own
// acquisition wrapper, which it went on from in place
// (proc.MaybeRunWrapperInPlace): it is the binary's own program, no
// hidden role.
func hiddenRole(args []string) (string, bool) {
	if len(args) < 2 {
		return "", false
	}
	role, ok := strings.CutPrefix(args[1], "__lazaret-")
	if !ok {
		return "", false
	}
	if args[1] == proc.WrapperArg {
		for _, a := range args[2:] {
			if a == "--" {
				break
			}
			if a == proc.HeldArg {
				return "", false
			}
		}
	}
	return role, true
}

// TestFirstSessionLikeJoined: a starting Domain's first non-interactive
// session is started by the sandbox's init (the coordinator's log says
// so), not by a `runsc exec` client — and so is a generation's first
// non-interactive session that joins after an interactive first one —
// and its command gets what a joining
// session's `runsc exec` gives it, as root and as a profile's non-root
// user: the same user and groups, capabilities, no_new_privs, limits,
// umask, working directory and environment; its stdin; output streams
// that end only once every writer is done (a background writer after the
// command's exit included); its exit status.
func TestFirstSessionLikeJoined(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	sub := filepath.Join(ws, "sub")
	os.Mkdir(sub, 0o755)
	os.Chown(sub, e.uid, e.gid)
	cfg := userConfig(t, e, "[profiles.agentp]\nimage = \"debian\"\nuser = \"agent\"\n")
	script := `read x; echo "in=$x"; id; grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status; ulimit -n; ulimit -u; umask; pwd; ` +
		`env | grep -v '^LAZARET_SESSION_' | sort; echo err >&2; (sleep 0.5; echo late; echo late-err >&2) & exit 5`
	for _, c := range []struct {
		name, uid, profile string
		args               []string
	}{
		{"root", "uid=0(root)", "tiny", []string{"-p", "tiny"}},
		{"agent", "uid=1000(agent)", "agentp", []string{"--config", cfg, "-p", "agentp"}},
	} {
		// startedBy is what started the Domain's last session, from its
		// log line.
		startedBy := func() string {
			b, _ := os.ReadFile(filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(sub, c.profile)), "hc.log"))
			by := ""
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, `msg="session started"`) {
					_, by, _ = strings.Cut(l, " by=")
				}
			}
			return by
		}
		run := func() result {
			return lzEnv(t, sub, nil, strings.NewReader("hello\n"), append(append([]string{"run"}, c.args...), "--", "sh", "-c", script)...)
		}
		first := run()
		if by := startedBy(); by != "init" {
			t.Fatalf("%s: the cold start's session was started by %q, want the init", c.name, by)
		}
		hold := e.cmd(sub, nil, append(append([]string{"run"}, c.args...), "--", "sh", "-c", "echo up; sleep 120")...)
		stdout, _ := hold.StdoutPipe()
		if err := hold.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := stdout.Read(make([]byte, 3)); err != nil {
			t.Fatalf("%s: holding session did not start: %v", c.name, err)
		}
		joined := run()
		by := startedBy()
		release(hold)
		if by != `"runsc exec"` {
			t.Fatalf("%s: a joining session was started by %s, want runsc exec", c.name, by)
		}
		if c.name == "root" {
			// A generation whose first session is interactive (through
			// runsc exec) leaves the init's slot to its first
			// non-interactive session, although it joins: as a starting
			// CLI's own session admitted after the publication (a loaded
			// host) does.
			p := startOnPTY(t, e, sub, nil, append([]string{filepath.Join(e.bin, "lazaret"), "run"}, append(c.args, "--", "sh", "-c", "echo tty-$((6*7)); sleep 120")...)...)
			p.until(t, "tty-42", 60*time.Second)
			late := run()
			lateBy := startedBy()
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.cmd.Wait()
			p.m.Close()
			if lateBy != "init" {
				t.Fatalf("after an interactive first session, the first non-interactive one was started by %s, want the init", lateBy)
			}
			if late.code != 5 || late.stdout != first.stdout {
				t.Errorf("a join started by the init: exit %d (want 5), what it sees differs from the first session's:\n%s\nfirst:\n%s", late.code, late.stdout, first.stdout)
			}
		}
		if first.code != 5 || joined.code != 5 {
			t.Errorf("%s: exit statuses: first %d, joined %d; want 5", c.name, first.code, joined.code)
		}
		if !strings.HasPrefix(first.stdout, "in=hello\n"+c.uid) || !strings.HasSuffix(first.stdout, "\nlate\n") {
			t.Errorf("%s: first session's stdout lacks its stdin, its user or the background writer's line:\n%s", c.name, first.stdout)
		}
		if first.stdout != joined.stdout {
			t.Errorf("%s: what the command sees differs:\nfirst session:\n%s\njoined session:\n%s", c.name, first.stdout, joined.stdout)
		}
		for _, r := range []result{first, joined} {
			if !strings.Contains(r.stderr, "err\n") || !strings.Contains(r.stderr, "late-err\n") {
				t.Errorf("%s: stderr lacks the command's lines:\n%s", c.name, r.stderr)
			}
		}
	}
	noLeftovers(t)
}

// TestCorruptStoreNamesTheWayOut (DX-5): a Domain whose store cannot be
// read is not started, and the refusal names what removes its state (and
// where to copy it first); that removal works and the next run starts
// afresh, leaving nothing behind.
func TestCorruptStoreNamesTheWayOut(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "true"); r.code != 0 {
		t.Fatalf("first run: %d\n%s", r.code, r.stderr)
	}
	noLeftovers(t)
	root := filepath.Join(e.stateHome, "lazaret", "domains", string(domainOf(ws, "tiny")))
	manifests, _ := filepath.Glob(filepath.Join(root, "store", "MANIFEST-*"))
	if len(manifests) == 0 {
		t.Fatalf("no store manifest under %s", root)
	}
	for _, m := range manifests {
		if err := os.WriteFile(m, []byte("not a pebble manifest, not at all"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := lz(t, ws, nil, "run", "-p", "tiny", "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "this Domain's records cannot be read") || !strings.Contains(r.stderr, "`lazaret rm -p tiny -C "+ws+"`") || !strings.Contains(r.stderr, "copy "+root+" aside") {
		t.Fatalf("run over a corrupt store: %d\n%s", r.code, r.stderr)
	}
	noLeftovers(t)
	if r := lz(t, ws, nil, "rm", "-p", "tiny", "-C", ws, "--yes"); r.code != 0 {
		t.Fatalf("the rm the refusal names: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := lz(t, ws, nil, "run", "-p", "tiny", "--", "echo", "afresh"); r.code != 0 || r.stdout != "afresh\n" {
		t.Fatalf("run after the rm: %d %q\n%s", r.code, r.stdout, r.stderr)
	}
	noLeftovers(t)
}
