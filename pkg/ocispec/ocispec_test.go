package ocispec

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func sandbox() Sandbox {
	return Sandbox{Hostname: "lazaret-x", Workspace: "/home/dev/proj", ControlSource: "/run/user/1001/lazaret/abc/control", NetNSPath: "/proc/4242/ns/net", Env: []string{"PATH=/usr/bin"}}
}

func TestSpecSecurityShape(t *testing.T) {
	sp, err := Spec(sandbox(), Process{Args: []string{InitPath, InitArg}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if !sp.Process.NoNewPrivileges {
		t.Error("noNewPrivileges unset")
	}
	b, _ := json.Marshal(sp)
	for _, bad := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_ADMIN"} {
		if strings.Contains(string(b), bad) {
			t.Errorf("spec grants %s", bad)
		}
	}
	var hostPaths []string
	for _, m := range sp.Mounts {
		if m.Type == "bind" {
			hostPaths = append(hostPaths, m.Source+"->"+m.Destination)
		}
	}
	if strings.Join(hostPaths, ",") != "/home/dev/proj->/workspace,/run/user/1001/lazaret/abc/control->/.lazaret" {
		t.Errorf("host paths: %v", hostPaths)
	}
	var netns string
	for _, ns := range sp.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			netns = ns.Path
		} else if ns.Path != "" {
			t.Errorf("%s has a path", ns.Type)
		}
	}
	if netns != "/proc/4242/ns/net" {
		t.Errorf("netns %q", netns)
	}
	// Guest root is RS's root (the developer); guest ids 1..65535 are RS's
	// subordinate ids, one extent each side of that boundary.
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: 1, HostID: 1, Size: 65535}}
	for name, m := range map[string][]specs.LinuxIDMapping{"uid": sp.Linux.UIDMappings, "gid": sp.Linux.GIDMappings} {
		if fmt.Sprint(m) != fmt.Sprint(want) {
			t.Errorf("%s map %v, want %v", name, m, want)
		}
	}
}

// TestFR14TerminalOnlyForSessions (FR-14): the root process of the
// attached `runsc run` is terminal-neutral; only an interactive session's
// process document asks runsc for a terminal (its stdio, the HC-owned PTY
// slave; runsc.Runtime.Exec passes no console socket, see TestFlags).
func TestFR14TerminalOnlyForSessions(t *testing.T) {
	sp, err := Spec(sandbox(), Process{Args: []string{InitPath, InitArg}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if sp.Process.Terminal {
		t.Error("root process asks for a terminal")
	}
	for _, tc := range []struct {
		terminal bool
		want     string
	}{{true, `"terminal":true`}, {false, `"terminal"`}} {
		b, err := ProcessJSON(Process{Args: []string{"sh"}, Cwd: "/", Terminal: tc.terminal})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), tc.want); got != tc.terminal {
			t.Errorf("session process (terminal %v): %s", tc.terminal, b)
		}
	}
}

func TestCheckHasTeeth(t *testing.T) {
	s := sandbox()
	mutations := map[string]func(*specs.Spec){
		"no nnp": func(sp *specs.Spec) { sp.Process.NoNewPrivileges = false },
		"net admin": func(sp *specs.Spec) {
			sp.Process.Capabilities.Effective = append(sp.Process.Capabilities.Effective, "CAP_NET_ADMIN")
		},
		"net raw ambient": func(sp *specs.Spec) { sp.Process.Capabilities.Ambient = []string{"CAP_NET_RAW"} },
		"host pid ns":     func(sp *specs.Spec) { sp.Linux.Namespaces[0].Path = "/proc/1/ns/pid" },
		"no user ns":      func(sp *specs.Spec) { sp.Linux.Namespaces = sp.Linux.Namespaces[:4] },
		"other netns":     func(sp *specs.Spec) { sp.Linux.Namespaces[5].Path = "/proc/1/ns/net" },
		"uid map beyond the guest range": func(sp *specs.Spec) {
			sp.Linux.UIDMappings = append(sp.Linux.UIDMappings, specs.LinuxIDMapping{ContainerID: 65536, HostID: 65536, Size: 1})
		},
		"gid map shifted": func(sp *specs.Spec) {
			sp.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1, Size: 65536}}
		},
		"host etc": func(sp *specs.Spec) {
			sp.Mounts = append(sp.Mounts, specs.Mount{Destination: "/etc/x", Type: "bind", Source: "/etc", Options: []string{"rbind", "ro"}})
		},
		"rw control": func(sp *specs.Spec) {
			sp.Mounts = append(sp.Mounts, specs.Mount{Destination: ControlDir + "/y", Type: "bind", Source: "/tmp", Options: []string{"rbind", "rw"}})
		},
		"bind via options": func(sp *specs.Spec) {
			sp.Mounts = append(sp.Mounts, specs.Mount{Destination: "/mnt", Type: "none", Source: "/", Options: []string{"rbind"}})
		},
	}
	for name, mutate := range mutations {
		sp, err := Spec(s, Process{Args: []string{"x"}, Cwd: "/"})
		if err != nil {
			t.Fatal(err)
		}
		mutate(sp)
		if err := Check(sp, s); err == nil {
			t.Errorf("%s: Check accepted the mutated spec", name)
		}
	}
}

func TestBadInputs(t *testing.T) {
	s := sandbox()
	s.NetNSPath = "/var/run/netns/x"
	if _, err := Spec(s, Process{Args: []string{"x"}, Cwd: "/"}); err == nil {
		t.Error("non-proc netns path accepted")
	}
	s = sandbox()
	s.Workspace = "rel/path"
	if _, err := Spec(s, Process{Args: []string{"x"}, Cwd: "/"}); err == nil {
		t.Error("relative workspace accepted")
	}
	if _, err := ProcessJSON(Process{Args: []string{"x"}, Cwd: "rel"}); err == nil {
		t.Error("relative cwd accepted")
	}
	if _, err := ProcessJSON(Process{Cwd: "/"}); err == nil {
		t.Error("empty argv accepted")
	}
	b, err := ProcessJSON(Process{Args: []string{"git", "status"}, Cwd: "/workspace/sub", Env: []string{"A=b"}})
	if err != nil {
		t.Fatal(err)
	}
	var p specs.Process
	if err := json.Unmarshal(b, &p); err != nil || !p.NoNewPrivileges || p.Cwd != "/workspace/sub" {
		t.Fatalf("process json %s %v", b, err)
	}
}

func TestVolumes(t *testing.T) {
	s := sandbox()
	s.Volumes = []Volume{{Source: "/home/dev/.cache/go", Target: "/root/go", ReadOnly: false}, {Source: "/srv/data", Target: "/data", ReadOnly: true}}
	sp, err := Spec(s, Process{Args: []string{"x"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range sp.Mounts {
		if m.Source == "/srv/data" && m.Destination == "/data" && hasOpt(m.Options, "ro") {
			n++
		}
		if m.Source == "/home/dev/.cache/go" && m.Destination == "/root/go" && hasOpt(m.Options, "rw") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("volumes not mounted as declared: %+v", sp.Mounts)
	}
	// A volume made writable behind the configuration's back is refused.
	for i := range sp.Mounts {
		if sp.Mounts[i].Destination == "/data" {
			sp.Mounts[i].Options = []string{"rbind", "rw"}
		}
	}
	if err := Check(sp, s); err == nil {
		t.Fatal("read-only volume remounted rw accepted")
	}
	for _, bad := range []string{"/workspace", "/workspace/x", "/.lazaret/bin", "/", "rel"} {
		s2 := sandbox()
		s2.Volumes = []Volume{{Source: "/srv", Target: bad}}
		if _, err := Spec(s2, Process{Args: []string{"x"}, Cwd: "/"}); err == nil {
			t.Errorf("volume target %q accepted", bad)
		}
	}
}

func TestHostFiles(t *testing.T) {
	s := sandbox()
	s.EtcFiles = map[string]string{"/etc/resolv.conf": "/run/g/etc/resolv.conf", "/etc/hosts": "/run/g/etc/hosts", "/etc/hostname": "/run/g/etc/hostname"}
	sp, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range sp.Mounts {
		if isHostFile(m.Destination) {
			n++
			if m.Source != s.EtcFiles[m.Destination] || hasOpt(m.Options, "rbind") {
				t.Errorf("host file mount %+v", m)
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d host file mounts", n)
	}
	// A host file mount from another source, and an unknown /etc target, are refused.
	sp.Mounts = append(sp.Mounts, specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: "/etc/hosts", Options: []string{"bind", "rw"}})
	if err := Check(sp, s); err == nil {
		t.Error("host /etc/hosts accepted")
	}
	s.EtcFiles["/etc/passwd"] = "/run/g/etc/passwd"
	if _, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"}); err == nil {
		t.Error("/etc/passwd accepted as a host file")
	}
	s = sandbox()
	s.Volumes = []Volume{{Source: "/srv/x", Target: "/etc/resolv.conf"}}
	if _, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"}); err == nil {
		t.Error("volume over /etc/resolv.conf accepted")
	}
}

// TestStateAnchorBinds (§3.5): anchors are bound rw exactly as declared,
// before the host files and volumes beneath them; an undeclared, moved or
// Lazaret-path anchor is refused.
func TestStateAnchorBinds(t *testing.T) {
	s := sandbox()
	dir := AnchorSourceDir("/run/user/1001/lazaret/abc/bundle")
	s.Anchors = []Anchor{{Source: dir + "/etc", Target: "/etc"}, {Source: dir + "/root", Target: "/root"}}
	s.EtcFiles = map[string]string{"/etc/hosts": "/run/user/1001/lazaret/abc/etc/hosts"}
	s.Volumes = []Volume{{Source: "/home/dev/.cache/go", Target: "/root/go"}}
	sp, err := Spec(s, Process{Args: []string{"x"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	order := map[string]int{}
	for i, m := range sp.Mounts {
		order[m.Destination] = i
	}
	if !(order["/etc"] < order["/etc/hosts"] && order["/root"] < order["/root/go"]) {
		t.Fatalf("anchors not mounted before what lies beneath them: %+v", sp.Mounts)
	}
	mutate := func(f func(*specs.Mount)) error {
		sp2, _ := Spec(s, Process{Args: []string{"x"}, Cwd: "/"})
		for i := range sp2.Mounts {
			f(&sp2.Mounts[i])
		}
		return Check(sp2, s)
	}
	if err := mutate(func(m *specs.Mount) {
		if m.Destination == "/etc" {
			m.Source = "/etc"
		}
	}); err == nil {
		t.Error("anchor bound from a host path accepted")
	}
	if err := mutate(func(m *specs.Mount) {
		if m.Destination == "/etc/hosts" {
			m.Source = "/etc/hosts"
		}
	}); err == nil {
		t.Error("host /etc/hosts accepted")
	}
	for _, bad := range []Anchor{{Source: dir + "/w", Target: "/workspace/x"}, {Source: dir + "/l", Target: "/.lazaret/x"}, {Source: "/tmp/x", Target: "/x"}} {
		s2 := sandbox()
		s2.Anchors = []Anchor{bad}
		if _, err := Spec(s2, Process{Args: []string{"x"}, Cwd: "/"}); err == nil {
			t.Errorf("anchor %+v accepted", bad)
		}
	}
}

// TestGitSentryMounts (SR-4, SR-13): the Git Sentry mounts follow the
// workspace parents first; Check refuses a protected bind of another path,
// a read-write bind planned read-only, and a workspace source that is not
// the planned one.
func TestGitSentryMounts(t *testing.T) {
	s := sandbox()
	s.WorkspaceSource = "/run/user/1001/lazaret/abc/workspace"
	s.RouterSource = s.WorkspaceSource
	s.Protected = []Protected{
		{Rel: ".git", Source: s.RouterSource + "/.git"},
		{Rel: ".git/config", Source: s.Workspace + "/.git/config", ReadOnly: true},
		{Rel: ".git/hooks", Transient: true},
	}
	sp, err := Spec(s, Process{Args: []string{"/bin/true"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range sp.Mounts {
		order = append(order, m.Destination+"="+m.Type)
	}
	if got := strings.Join(order, " "); !strings.Contains(got, "/workspace=bind /workspace/.git=bind /workspace/.git/config=bind /workspace/.git/hooks=tmpfs /.lazaret=bind") {
		t.Errorf("mount order: %s", got)
	}
	for i, m := range sp.Mounts {
		switch m.Destination {
		case "/workspace":
			if m.Source != s.WorkspaceSource {
				t.Errorf("workspace source %s", m.Source)
			}
			bad := *sp
			bad.Mounts = append([]specs.Mount(nil), sp.Mounts...)
			bad.Mounts[i].Source = s.Workspace + "/../etc"
			if Check(&bad, s) == nil {
				t.Errorf("Check accepted a foreign workspace source")
			}
		case "/workspace/.git/config":
			bad := *sp
			bad.Mounts = append([]specs.Mount(nil), sp.Mounts...)
			bad.Mounts[i].Options = []string{"bind", "rw"}
			if Check(&bad, s) == nil {
				t.Errorf("Check accepted a writable .git/config")
			}
			bad.Mounts[i].Options = []string{"bind", "ro"}
			bad.Mounts[i].Source = "/home/dev/.ssh/config"
			if Check(&bad, s) == nil {
				t.Errorf("Check accepted a protected bind of another path")
			}
		}
	}
	s.Protected = []Protected{{Rel: ".git/config", Source: "/etc/passwd", ReadOnly: true}}
	if _, err := Spec(s, Process{Args: []string{"/bin/true"}, Cwd: "/"}); err == nil {
		t.Errorf("Spec accepted a protected path bound from elsewhere")
	}
	s.Protected = []Protected{{Rel: "../x", Transient: true}}
	if _, err := Spec(s, Process{Args: []string{"/bin/true"}, Cwd: "/"}); err == nil {
		t.Errorf("Spec accepted a protected path outside the workspace")
	}
}

// TestCommonGitDir (SR-3, SR-4): an opted-in common Git directory is bound
// at its own path after the volumes, its Git Sentry on top; Check refuses a
// bind planned read-only made writable or bound from elsewhere, and Spec
// refuses a common directory overlapping Lazaret's mounts or covering a
// State Anchor.
func TestCommonGitDir(t *testing.T) {
	s := sandbox()
	c := "/home/dev/repo/.git"
	s.GitCommonDir = c
	s.CommonProtected = []Protected{
		{Rel: ".", Source: c, ReadOnly: true},
		{Rel: "config", Source: c + "/config", ReadOnly: true},
		{Rel: "hooks", Transient: true},
		{Rel: "objects", Source: c + "/objects"},
	}
	sp, err := Spec(s, Process{Args: []string{"/bin/true"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range sp.Mounts {
		order = append(order, m.Destination+"="+m.Type+fmt.Sprint(m.Options))
	}
	if got := strings.Join(order, " "); !strings.HasSuffix(got, c+"=bind[bind ro] "+c+"/config=bind[bind ro] "+c+"/hooks=tmpfs[nosuid nodev mode=755 size=65536k] "+c+"/objects=bind[bind rw]") {
		t.Errorf("mounts: %s", got)
	}
	n := len(sp.Mounts)
	bad := *sp
	bad.Mounts = append([]specs.Mount(nil), sp.Mounts...)
	bad.Mounts[n-4].Options = []string{"bind", "rw"}
	if Check(&bad, s) == nil {
		t.Errorf("Check accepted the common directory made writable")
	}
	bad.Mounts = append([]specs.Mount(nil), sp.Mounts...)
	bad.Mounts[n-1].Source = "/home/dev/.ssh"
	if Check(&bad, s) == nil {
		t.Errorf("Check accepted a common directory bind of another path")
	}
	for _, d := range []string{"/workspace/x", "/", "/.lazaret", "/etc/hosts"} {
		s2 := s
		s2.GitCommonDir = d
		if _, err := Spec(s2, Process{Args: []string{"/bin/true"}, Cwd: "/"}); err == nil {
			t.Errorf("common Git directory %s accepted", d)
		}
	}
	s2 := s
	s2.GitCommonDir, s2.Anchors = "/home", []Anchor{{Source: "/b/anchors/home", Target: "/home/dev"}}
	if _, err := Spec(s2, Process{Args: []string{"/bin/true"}, Cwd: "/"}); err == nil {
		t.Errorf("common Git directory covering a State Anchor accepted")
	}
	s2 = s
	s2.CommonProtected = []Protected{{Rel: ".", Source: "/etc"}}
	if _, err := Spec(s2, Process{Args: []string{"/bin/true"}, Cwd: "/"}); err == nil {
		t.Errorf("common Git directory bound from elsewhere accepted")
	}
}

// TestProfilePathBinds: a profile path is bound read-write, nosuid, from
// a profile's stored directory, after the State Anchor it lies in; Check
// refuses another source and a recursive bind, Spec a target on
// Lazaret's mounts or a source outside the layout.
func TestProfilePathBinds(t *testing.T) {
	s := sandbox()
	dir := AnchorSourceDir("/run/user/1001/lazaret/abc/bundle")
	src := "/home/dev/.local/state/lazaret/profiles/claude/paths/home%2Fagent%2F.claude/data"
	s.Anchors = []Anchor{{Source: dir + "/home", Target: "/home"}}
	s.ProfilePaths = []ProfilePath{{Source: src, Target: "/home/agent/.claude"}}
	sp, err := Spec(s, Process{Args: []string{"x"}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	order := map[string]int{}
	var got specs.Mount
	for i, m := range sp.Mounts {
		order[m.Destination] = i
		if m.Destination == "/home/agent/.claude" {
			got = m
		}
	}
	if order["/home"] >= order["/home/agent/.claude"] {
		t.Fatalf("profile path mounted before its State Anchor: %+v", sp.Mounts)
	}
	if got.Source != src || !hasOpt(got.Options, "rw") || !hasOpt(got.Options, "nosuid") || hasOpt(got.Options, "rbind") {
		t.Fatalf("profile path mount %+v", got)
	}
	mutate := func(f func(*specs.Mount)) error {
		sp2, _ := Spec(s, Process{Args: []string{"x"}, Cwd: "/"})
		for i := range sp2.Mounts {
			if sp2.Mounts[i].Destination == "/home/agent/.claude" {
				f(&sp2.Mounts[i])
			}
		}
		return Check(sp2, s)
	}
	if err := mutate(func(m *specs.Mount) { m.Source = "/home/dev/.claude" }); err == nil {
		t.Error("profile path bound from the developer's home accepted")
	}
	if err := mutate(func(m *specs.Mount) { m.Options = []string{"rbind", "rw", "nosuid"} }); err == nil {
		t.Error("recursive profile path bind accepted")
	}
	for _, bad := range []ProfilePath{
		{Source: src, Target: "/workspace/x"}, {Source: src, Target: "/.lazaret"}, {Source: src, Target: "/"},
		{Source: src, Target: "/etc/hosts"}, {Source: "/home/dev/.claude", Target: "/home/agent/.claude"},
		{Source: "/s/profiles/claude/paths/x/other", Target: "/x"}, {Source: src, Target: "rel"},
	} {
		s2 := sandbox()
		s2.ProfilePaths = []ProfilePath{bad}
		if _, err := Spec(s2, Process{Args: []string{"x"}, Cwd: "/"}); err == nil {
			t.Errorf("profile path %+v accepted", bad)
		}
	}
}

func TestRlimits(t *testing.T) {
	rlimit := func(b []byte) map[string][2]uint64 {
		var p specs.Process
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		m := map[string][2]uint64{}
		for _, r := range p.Rlimits {
			m[r.Type] = [2]uint64{r.Soft, r.Hard}
		}
		return m
	}
	b, err := ProcessJSON(Process{Args: []string{"sh"}, Cwd: "/", Rlimits: Rlimits{NProc: 256, NoFile: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	got := rlimit(b)
	if got["RLIMIT_NPROC"] != [2]uint64{256, 256} || got["RLIMIT_NOFILE"] != [2]uint64{1024, 1024} {
		t.Fatalf("rlimits %v, want NPROC 256 and NOFILE 1024, soft = hard", got)
	}
	b, _ = ProcessJSON(Process{Args: []string{"sh"}, Cwd: "/"})
	got = rlimit(b)
	if got["RLIMIT_NPROC"][1] != DefaultRlimits.NProc || got["RLIMIT_NOFILE"][1] != DefaultRlimits.NoFile {
		t.Fatalf("default rlimits %v, want %+v", got, DefaultRlimits)
	}
	sp, err := Spec(sandbox(), Process{Args: []string{"init"}, Cwd: "/", Rlimits: Rlimits{NProc: 300, NoFile: 2048}})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(sp.Process)
	if got := rlimit(js); got["RLIMIT_NPROC"] != [2]uint64{300, 300} {
		t.Fatalf("init rlimits %v, want NPROC 300", got)
	}
}

// TestLaunchEnvironment: the launcher gets GOMAXPROCS=1 and the flag that
// tells it the entry is its own only when the command's environment sets
// no GOMAXPROCS; the init's own entry comes last (runsc keeps the last).
func TestLaunchEnvironment(t *testing.T) {
	p := Launch(Process{Args: []string{"cat", "x"}, Env: []string{"PATH=/bin", "TERM=dumb"}})
	if want := []string{InitPath, ExecArg, LaunchEnvArg, "--", "cat", "x"}; !reflect.DeepEqual(p.Args, want) {
		t.Errorf("args %q, want %q", p.Args, want)
	}
	if want := []string{"PATH=/bin", "TERM=dumb", LaunchGOMAXPROCS}; !reflect.DeepEqual(p.Env, want) {
		t.Errorf("env %q, want %q", p.Env, want)
	}
	own := []string{"PATH=/bin", "GOMAXPROCS=4"}
	p = Launch(Process{Args: []string{"go", "test"}, Env: own})
	if want := []string{InitPath, ExecArg, "--", "go", "test"}; !reflect.DeepEqual(p.Args, want) {
		t.Errorf("args with the profile's GOMAXPROCS %q, want %q", p.Args, want)
	}
	if !reflect.DeepEqual(p.Env, own) {
		t.Errorf("env with the profile's GOMAXPROCS %q, want it unchanged", p.Env)
	}
	// A variable whose name only starts with GOMAXPROCS is not it.
	if p := Launch(Process{Env: []string{"GOMAXPROCS_X=1"}}); p.Env[len(p.Env)-1] != LaunchGOMAXPROCS {
		t.Errorf("GOMAXPROCS_X taken for GOMAXPROCS: %q", p.Env)
	}
	p = LaunchIdentified(Process{Args: []string{"sh", "--", "-c"}, Env: []string{"PATH=/bin"}})
	if want := []string{InitPath, ExecArg, LaunchEnvArg, IdentityArg, "--", "sh", "--", "-c"}; !reflect.DeepEqual(p.Args, want) {
		t.Errorf("identified launch args %q, want %q", p.Args, want)
	}
	base := []string{"PATH=/bin", "GOMAXPROCS=8"}
	if got := InitEnv(base); !reflect.DeepEqual(got, []string{"PATH=/bin", "GOMAXPROCS=8", LaunchGOMAXPROCS}) || len(base) != 2 {
		t.Errorf("init env %q (base %q)", got, base)
	}
}

// TestIgnoredBinds: Git-ignored directories bound from the Domain's
// Ignored Workspace State, only at their own workspace path, from their own
// state directory, never in a Git directory.
func TestIgnoredBinds(t *testing.T) {
	base := sandbox()
	base.RouterSource, base.WorkspaceSource = "/run/user/1001/lazaret/abc/workspace", "/run/user/1001/lazaret/abc/workspace"
	base.DomainRoot = "/home/dev/.local/state/lazaret/domains/abc"
	st := base.DomainRoot + "/ignored-state"
	s := base
	s.IgnoredBinds = []IgnoredBind{{Rel: "node_modules", Source: st + "/node_modules"}, {Rel: "app/.venv", Source: st + "/app/.venv"}}
	sp, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range sp.Mounts {
		if strings.HasPrefix(m.Source, st) {
			got[m.Destination] = m.Source + " " + strings.Join(m.Options, ",")
		}
	}
	if got["/workspace/node_modules"] != st+"/node_modules bind,rw,nosuid,nodev" || got["/workspace/app/.venv"] != st+"/app/.venv bind,rw,nosuid,nodev" || len(got) != 2 {
		t.Fatalf("ignored binds %v", got)
	}
	for name, b := range map[string]IgnoredBind{
		"dotdot":       {Rel: "../x", Source: st + "/../x"},
		"absolute":     {Rel: "/etc", Source: st + "/etc"},
		"unclean":      {Rel: "a/./b", Source: st + "/a/b"},
		"git":          {Rel: ".git", Source: st + "/.git"},
		"in git":       {Rel: "sub/.git/hooks", Source: st + "/sub/.git/hooks"},
		"other source": {Rel: "node_modules", Source: "/home/dev/secrets"},
		"other state":  {Rel: "node_modules", Source: st + "/dist"},
		"outside root": {Rel: "node_modules", Source: "/home/dev/.local/state/lazaret/domains/other/ignored-state/node_modules"},
		"empty":        {Rel: "", Source: st},
		"dot":          {Rel: ".", Source: st},
	} {
		s := base
		s.IgnoredBinds = []IgnoredBind{b}
		if _, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"}); err == nil {
			t.Errorf("%s: ignored bind %+v accepted", name, b)
		}
	}
	s = base
	s.IgnoredBinds = []IgnoredBind{{Rel: "a", Source: st + "/a"}, {Rel: "a/b", Source: st + "/a/b"}}
	if _, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"}); err == nil {
		t.Error("nested ignored binds accepted")
	}
	s = base
	s.DomainRoot = ""
	s.IgnoredBinds = []IgnoredBind{{Rel: "node_modules", Source: "/ignored-state/node_modules"}}
	if _, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"}); err == nil {
		t.Error("ignored bind without a Domain root accepted")
	}
	s = base
	s.Protected = []Protected{{Rel: ".vscode", Transient: true}}
	s.IgnoredBinds = []IgnoredBind{{Rel: ".vscode", Source: st + "/.vscode"}}
	if _, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"}); err == nil {
		t.Error("ignored bind over a Git Sentry mount accepted")
	}
	s = sandbox() // the plain workspace bind: no daemon to provide mount points
	s.DomainRoot = base.DomainRoot
	s.IgnoredBinds = []IgnoredBind{{Rel: "node_modules", Source: st + "/node_modules"}}
	if _, err := Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"}); err == nil {
		t.Error("ignored bind over the host workspace accepted")
	}
	// Check has teeth: a mount that looks like an ignored bind but binds
	// another state directory, or elsewhere, is refused.
	s = base
	s.IgnoredBinds = []IgnoredBind{{Rel: "node_modules", Source: st + "/node_modules"}}
	sp, err = Spec(s, Process{Args: []string{InitPath, InitArg}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range sp.Mounts {
		if m.Destination != "/workspace/node_modules" {
			continue
		}
		for _, mut := range []func(*specs.Mount){
			func(m *specs.Mount) { m.Source = st + "/other" },
			func(m *specs.Mount) { m.Destination = "/etc" },
			func(m *specs.Mount) { m.Options = []string{"rbind", "rw", "nosuid", "nodev"} },
			func(m *specs.Mount) { m.Options = []string{"bind", "rw"} },
		} {
			bad := *sp
			bad.Mounts = append([]specs.Mount(nil), sp.Mounts...)
			mut(&bad.Mounts[i])
			if err := Check(&bad, s); err == nil {
				t.Errorf("Check accepted %+v", bad.Mounts[i])
			}
		}
	}
}
