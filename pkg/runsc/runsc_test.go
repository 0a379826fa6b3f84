package runsc

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
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
	if k := strings.Join(r.KillGroup("c", "INT", 7), " "); !strings.HasSuffix(k, "kill --pgid=7 c INT") {
		t.Error(k)
	}
	if k := strings.Join(r.KillPID("c", "TERM", 9), " "); !strings.HasSuffix(k, "kill --pid=9 c TERM") {
		t.Error(k)
	}
	if k := strings.Join(r.Kill("c", "KILL"), " "); !strings.HasSuffix(k, "kill --all c KILL") {
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
