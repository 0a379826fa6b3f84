package runsc

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestDentryCache(t *testing.T) {
	for hard, want := range map[uint64]int{1024: 1000, 20000: 5000, 524288: 65536, 1 << 62: 65536} {
		if got := dentryCacheFor(hard); got != want {
			t.Errorf("dentryCacheFor(%d) = %d, want %d", hard, got, want)
		}
	}
}

// TestFlags: the exact argument vectors, among them (FR-14) a
// non-detached `runsc exec` without a console socket.
func TestFlags(t *testing.T) {
	r := Runtime{Path: "/x/runsc", Root: "/run/r"}
	got := strings.Join(r.Run("/b", "lazaret-abc-1"), " ")
	if got != "/x/runsc --root=/run/r --ignore-cgroups --network=sandbox --overlay2=root:memory --file-access-mounts=shared --dcache="+strconv.Itoa(DentryCache())+" run --bundle /b lazaret-abc-1" {
		t.Fatal(got)
	}
	for _, bad := range []string{"--rootless", "all:", "--detach"} {
		if strings.Contains(got, bad) {
			t.Errorf("flag %s present", bad)
		}
	}
	if e := strings.Join(r.Exec("/p.json", "/pid", "c"), " "); !strings.HasSuffix(e, "exec --process /p.json --internal-pid-file /pid c") {
		t.Error(e)
	}
	if e := strings.Join(r.Run("/b", "c", 3), " "); !strings.HasSuffix(e, "run --bundle /b --pass-fd 3:3 c") {
		t.Error(e)
	}
	if e := strings.Join(r.Exec("/p.json", "/pid", "c", 3), " "); !strings.HasSuffix(e, "exec --process /p.json --internal-pid-file /pid --pass-fd 3:3 c") {
		t.Error(e)
	}
	if k := strings.Join(r.KillGroup("c", "INT", 7), " "); !strings.HasSuffix(k, "kill --pgid=7 c INT") {
		t.Error(k)
	}
	if k := strings.Join(r.KillPID("c", "TERM", 9), " "); !strings.HasSuffix(k, "kill --pid=9 c TERM") {
		t.Error(k)
	}
}

func TestContainerID(t *testing.T) {
	id := ContainerID("0123456789abcdef0123456789abcdef", 3)
	if !ValidContainerID(id) || ValidContainerID("../x") || ValidContainerID("") {
		t.Fatal(id)
	}
	// The rule, as the regular expression it replaces.
	rule := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,127}$`)
	for _, s := range []string{"a", "0", "_a", ".a", "-a", "a_b.c-d", "a-", "A", "aB", "a/b", "a b", "é", "a\x00",
		strings.Repeat("a", 127), strings.Repeat("a", 128), strings.Repeat("a", 129), "lazaret-" + strings.Repeat("f", 32) + "-12"} {
		if got, want := ValidContainerID(s), rule.MatchString(s); got != want {
			t.Errorf("ValidContainerID(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestStateContainers(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"lazaret-abc-4_sandbox:lazaret-abc-4.state", "lazaret-abc-4_sandbox:lazaret-abc-4.lock", "null-netns", "bad id_sandbox:x.state"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o600)
	}
	ids, err := StateContainers(dir)
	if err != nil || len(ids) != 1 || ids[0] != "lazaret-abc-4" {
		t.Fatalf("%v %v", ids, err)
	}
}

// TestStateRoundTrip: ReadState takes the pid locators from the fields
// runsc writes (a trimmed copy of a real state file), refuses a file of
// another container, and RemoveState removes exactly what `runsc delete`
// would, leaving other containers' state.
func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	id, other := "lazaret-abc-4", "lazaret-abc-5"
	real := `{"id":"lazaret-abc-4","bundleDir":"/b","status":"running","goferPid":28905,` +
		`"sandbox":{"id":"lazaret-abc-4","pid":28906,"uid":0,"controlSocketPath":"/r/runsc-lazaret-abc-4.sock"},"saver":{}}`
	for name, body := range map[string]string{
		id + "_sandbox:" + id + ".state": real, id + "_sandbox:" + id + ".lock": "", "runsc-" + id + ".sock": "",
		other + "_sandbox:" + other + ".state": "{}", "null-netns": "",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ReadState(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if st != (State{ContainerID: id, Status: "running", SandboxPID: 28906, GoferPID: 28905}) {
		t.Fatalf("state %+v", st)
	}
	if _, err := ReadState(dir, other); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("state naming no container: %v", err)
	}
	if _, err := ReadState(dir, "lazaret-abc-6"); !errors.Is(err, ErrNoState) {
		t.Fatalf("absent state: %v", err)
	}
	if _, err := ReadState(dir, "../x"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("bad id: %v", err)
	}
	if err := RemoveState(dir, id); err != nil {
		t.Fatal(err)
	}
	if err := RemoveState(dir, id); err != nil {
		t.Fatalf("second removal: %v", err)
	}
	left, _ := os.ReadDir(dir)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "lazaret-abc-5_sandbox:lazaret-abc-5.state null-netns" {
		t.Fatalf("left after RemoveState: %v", names)
	}
}

// TestNoNumericPidSubcommands: the argv builders cannot express the runsc
// subcommands that signal host pids from the state file.
func TestNoNumericPidSubcommands(t *testing.T) {
	r := Runtime{Path: "/x/runsc", Root: "/run/r"}
	for _, argv := range [][]string{r.Run("/b", "c"), r.Exec("/p", "/f", "c"), r.KillPID("c", "TERM", 3), r.KillGroup("c", "INT", 3), r.List()} {
		j := " " + strings.Join(argv, " ") + " "
		if strings.Contains(j, " delete ") || strings.Contains(j, " --all ") || strings.Contains(j, "-force") {
			t.Errorf("argv %q", j)
		}
	}
}

// TestReadInternalPID: a whole positive pid, with runsc's trailing newline
// or without; nothing before runsc has written one.
func TestReadInternalPID(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		content string
		pid     int
		ok      bool
	}{{"42\n", 42, true}, {"7", 7, true}, {"", 0, false}, {"0", 0, false}, {"-3", 0, false}, {"4x", 0, false}} {
		f := filepath.Join(dir, "pid")
		os.WriteFile(f, []byte(c.content), 0o600)
		if pid, ok := ReadInternalPID(f); ok != c.ok || (ok && pid != c.pid) {
			t.Errorf("%q: %d %v, want %d %v", c.content, pid, ok, c.pid, c.ok)
		}
	}
	if _, ok := ReadInternalPID(filepath.Join(dir, "absent")); ok {
		t.Error("an absent pid file read as a pid")
	}
}
