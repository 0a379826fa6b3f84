package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/capability"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// inPlaceEnv names the file the test binary, gone on in place as an
// acquisition's target, reports to: its pid, argv and capabilities.
const inPlaceEnv = "LAZARET_PROC_TEST_IN_PLACE"

// inPlaceTarget is the test binary's target role after
// MaybeRunWrapperInPlace returned.
func inPlaceTarget(out string) int {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d\nargs %s\n", os.Getpid(), strings.Join(os.Args[1:], " "))
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, task := range tasks {
		st, err := os.ReadFile(task)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "Cap") && !strings.HasPrefix(l, "CapBnd") {
				fmt.Fprintf(&b, "%s %s\n", filepath.Base(filepath.Dir(task)), strings.Join(strings.Fields(l), " "))
			}
		}
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return 2
	}
	return 3
}

// acquireInPlace acquires the test binary in place, reporting to out.
func acquireInPlace(t *testing.T, out string, clone uintptr, setup func(context.Context, *pidfs.Handle) error, stage func(context.Context, pidfs.Identity) error) (*Child, error) {
	t.Helper()
	return acquireInPlaceWith(t, testBroker(t), "", nil, out, clone, setup, stage)
}

// acquireInPlaceWith is acquireInPlace through broker b, with unshare(1)
// at unshareExe creating the namespaces (and writing maps, if not nil)
// when it is not "".
func acquireInPlaceWith(t *testing.T, b *Broker, unshareExe string, maps *IDMaps, out string, clone uintptr, setup func(context.Context, *pidfs.Handle) error, stage func(context.Context, pidfs.Identity) error) (*Child, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return b.Acquire(context.Background(), AcquireSpec{
		Slot:       "t",
		InPlace:    true,
		UnshareExe: unshareExe,
		Maps:       maps,
		Target:     Command{Path: exe, Args: []string{"target", "a", "b"}, Env: []string{inPlaceEnv + "=" + out}, Cloneflags: clone},
		Setup:      setup,
		Stage:      stage,
	})
}

// TestInPlaceGoesOnAfterStaging: the target's own binary waits at the
// barrier and, released, goes on as the target in the staged process, with
// the target's arguments; nothing of the target ran before.
func TestInPlaceGoesOnAfterStaging(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var staged pidfs.Identity
	c, err := acquireInPlace(t, out, 0, nil, func(_ context.Context, id pidfs.Identity) error {
		staged = id
		time.Sleep(50 * time.Millisecond) // the held binary has initialised by now
		if _, err := os.Stat(out); err == nil {
			t.Error("the target ran before the barrier was released")
		}
		return nil
	})
	exitedWith3(t, c, err)
	b, _ := os.ReadFile(out)
	if want := fmt.Sprintf("pid %d\nargs a b\n", staged.HostPID); !strings.HasPrefix(string(b), want) {
		t.Errorf("the target reported %q, want it to start %q (the staged process, the target's arguments)", b, want)
	}
	if c.Identity() != staged {
		t.Error("identity changed between staging and child")
	}
}

// TestInPlaceStageFailureNeverRunsTarget: a refused stage closes the
// barrier; the held binary exits without going on.
func TestInPlaceStageFailureNeverRunsTarget(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, err := acquireInPlace(t, out, 0, nil, func(context.Context, pidfs.Identity) error { return errors.New("store refused") })
	refusedStageNeverRan(t, err, out)
}

// TestInPlaceKeepsCapabilitiesInNewUserNamespace: executed into a new
// user namespace before Setup wrote its id maps, the held binary still
// holds every capability there once released, as a target executed as
// that namespace's root would; and, as such a target, no inheritable or
// ambient capability on any thread.
func TestInPlaceKeepsCapabilitiesInNewUserNamespace(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	c, err := acquireInPlace(t, out, unix.CLONE_NEWUSER, mapOwnIDs, nil)
	exitedWith3(t, c, err)
	checkNamespaceRootCapabilities(t, out)
}

// mapOwnIDs maps the child's namespace root to the test's own ids: it
// fails unless the child is already in a new user namespace.
func mapOwnIDs(_ context.Context, h *pidfs.Handle) error {
	for _, w := range [][2]string{{"setgroups", "deny"}, {"uid_map", fmt.Sprintf("0 %d 1", os.Getuid())}, {"gid_map", fmt.Sprintf("0 %d 1", os.Getgid())}} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", h.PID(), w[0]), []byte(w[1]), 0); err != nil {
			return err
		}
	}
	return nil
}

// checkNamespaceRootCapabilities checks the target's report in out: every
// capability permitted and effective, none inheritable or ambient, on
// every thread.
func checkNamespaceRootCapabilities(t *testing.T, out string) {
	t.Helper()
	last, err := capability.Last()
	if err != nil {
		t.Fatal(err)
	}
	full := fmt.Sprintf("%016x", uint64(1)<<(last+1)-1)
	b, _ := os.ReadFile(out)
	threads := 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n")[2:] {
		f := strings.Fields(l) // <tid> CapXxx: <hex>
		if len(f) != 3 {
			t.Fatalf("report line %q", l)
		}
		want := "0000000000000000"
		switch f[1] {
		case "CapPrm:", "CapEff:":
			want = full
		case "CapInh:":
			threads++
		}
		if f[2] != want {
			t.Errorf("thread %s: %s %s, want %s", f[0], f[1], f[2], want)
		}
	}
	if threads < 2 {
		t.Errorf("capabilities of %d threads reported, want every thread of a Go process:\n%s", threads, b)
	}
}

// loggingBroker is testBroker with its log, from level on, in the
// returned buffer.
func loggingBroker(t *testing.T, level slog.Level) (*Broker, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	b := testBroker(t)
	b.log = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: level}))
	return b, &log
}

// unshareTool is util-linux's unshare(1) (UnshareTool), which the Host
// Coordinator uses to create the Runtime Supervisor's namespaces.
func unshareTool(t *testing.T) string {
	t.Helper()
	p := UnshareTool()
	if p == "" {
		t.Fatal("no unshare(1) at /usr/bin/unshare: install util-linux (apt-get install util-linux)")
	}
	return p
}

// TestInPlaceThroughUnshare (AcquireSpec.UnshareExe): unshare(1) creates
// the new user, mount and network namespaces and executes the held
// wrapper in them; Setup maps the ids once the child is in its user
// namespace (mapOwnIDs fails before), and the target goes on in place as
// that namespace's root, in new mount and network namespaces, keeping no
// inheritable or ambient capability — without falling back to the clone.
func TestInPlaceThroughUnshare(t *testing.T) {
	tool := unshareTool(t)
	b, log := loggingBroker(t, slog.LevelDebug)
	out := filepath.Join(t.TempDir(), "out")
	var nsDiffer bool
	setup := func(ctx context.Context, h *pidfs.Handle) error {
		for _, ns := range []string{"mnt", "net"} {
			own, _ := os.Readlink("/proc/self/ns/" + ns)
			theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", h.PID(), ns))
			nsDiffer = err == nil && theirs != own
			if !nsDiffer {
				return fmt.Errorf("%s namespace %q, the broker's %q (%v)", ns, theirs, own, err)
			}
		}
		return mapOwnIDs(ctx, h)
	}
	c, err := acquireInPlaceWith(t, b, tool, nil, out, unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWNET, setup, nil)
	exitedWith3(t, c, err)
	checkNamespaceRootCapabilities(t, out)
	if rep, _ := os.ReadFile(out); !strings.Contains(string(rep), "\nargs a b\n") {
		t.Errorf("target's arguments: %s", rep)
	}
	if strings.Contains(log.String(), "cloning into them instead") || !strings.Contains(log.String(), "unshare(1) created the namespaces") {
		t.Errorf("the namespaces were not unshare(1)'s:\n%s", log.String())
	}
}

// TestInPlaceUnshareFailureFallsBackToClone: an unshare(1) that exits
// without entering a new namespace (here /bin/false) costs a retry, not
// the acquisition: the child is cloned into its namespaces instead, the
// broker's log says so, and the target runs as with the clone.
func TestInPlaceUnshareFailureFallsBackToClone(t *testing.T) {
	b, log := loggingBroker(t, slog.LevelInfo)
	out := filepath.Join(t.TempDir(), "out")
	c, err := acquireInPlaceWith(t, b, "/bin/false", nil, out, unix.CLONE_NEWUSER, mapOwnIDs, nil)
	exitedWith3(t, c, err)
	checkNamespaceRootCapabilities(t, out)
	if !strings.Contains(log.String(), "cloning into them instead") || !strings.Contains(log.String(), "unshare=/bin/false") {
		t.Errorf("no fallback logged:\n%s", log.String())
	}
}

// ownMaps are the maps mapOwnIDs writes: the namespace's root is the
// test's own uid and gid.
func ownMaps() *IDMaps {
	return &IDMaps{UID: []IDMap{{Inner: 0, Outer: uint32(os.Geteuid()), Count: 1}}, GID: []IDMap{{Inner: 0, Outer: uint32(os.Getegid()), Count: 1}}}
}

// TestInPlaceThroughUnshareWithMaps (AcquireSpec.Maps): unshare(1) writes
// the new user namespace's id maps before it executes the held wrapper,
// and the broker checks them instead of running Setup: the wrapper
// executes as the namespace's root (without --keep-caps, so only maps
// written before the exec give it the capabilities it holds) and the
// target goes on in place with every capability there, nothing
// inheritable or ambient, and the maps asked for.
func TestInPlaceThroughUnshareWithMaps(t *testing.T) {
	tool := unshareTool(t)
	b, log := loggingBroker(t, slog.LevelDebug)
	out := filepath.Join(t.TempDir(), "out")
	var seen string
	stage := func(_ context.Context, id pidfs.Identity) error {
		u, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", id.HostPID))
		g, _ := os.ReadFile(fmt.Sprintf("/proc/%d/gid_map", id.HostPID))
		seen = strings.Join(strings.Fields(string(u)), " ") + " / " + strings.Join(strings.Fields(string(g)), " ")
		return err
	}
	setup := func(context.Context, *pidfs.Handle) error {
		t.Error("Setup ran although unshare(1) wrote the maps")
		return nil
	}
	c, err := acquireInPlaceWith(t, b, tool, ownMaps(), out, unix.CLONE_NEWUSER|unix.CLONE_NEWNS|unix.CLONE_NEWNET, setup, stage)
	exitedWith3(t, c, err)
	checkNamespaceRootCapabilities(t, out)
	if want := fmt.Sprintf("0 %d 1 / 0 %d 1", os.Geteuid(), os.Getegid()); seen != want {
		t.Errorf("maps at the stage %q, want %q", seen, want)
	}
	if strings.Contains(log.String(), "cloning into them instead") {
		t.Errorf("fell back to the clone:\n%s", log.String())
	}
}

// TestInPlaceUnshareWrongMapsFallsBackToClone: an unshare(1) that writes
// other maps than asked (here one whose --map-user is rewritten) costs a
// retry, not the acquisition, and never the wrong maps: the child is
// killed before its release and cloned instead, Setup writes the maps, the
// broker's log says what unshare(1) wrote, and the target runs as with
// the clone.
func TestInPlaceUnshareWrongMapsFallsBackToClone(t *testing.T) {
	tool := unshareTool(t)
	fake := filepath.Join(t.TempDir(), "unshare")
	script := "#!/bin/sh\nfor a; do shift; case $a in --map-user=0) set -- \"$@\" --map-user=7;; *) set -- \"$@\" \"$a\";; esac; done\nexec " + tool + " \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b, log := loggingBroker(t, slog.LevelInfo)
	out := filepath.Join(t.TempDir(), "out")
	setups := 0
	setup := func(ctx context.Context, h *pidfs.Handle) error {
		setups++
		return mapOwnIDs(ctx, h)
	}
	c, err := acquireInPlaceWith(t, b, fake, ownMaps(), out, unix.CLONE_NEWUSER, setup, nil)
	exitedWith3(t, c, err)
	checkNamespaceRootCapabilities(t, out)
	if setups != 1 {
		t.Errorf("Setup ran %d times, want once (in the clone)", setups)
	}
	if l := log.String(); !strings.Contains(l, "did not write the id maps wanted; cloning into them instead") || !strings.Contains(l, `7 `) {
		t.Errorf("no fallback logged with the maps unshare(1) wrote:\n%s", l)
	}
}

// TestUnshareMapOptions: the maps unshare(1) can write become its options
// (the own id alone, then at most one range, as "outer,inner,count");
// any other form is left to Setup.
func TestUnshareMapOptions(t *testing.T) {
	own := []IDMap{{Inner: 0, Outer: 1000, Count: 1}}
	withRange := append(own, IDMap{Inner: 1, Outer: 100000, Count: 65536})
	for _, c := range []struct {
		name string
		maps *IDMaps
		want string // "" for none
	}{
		{"none", nil, ""},
		{"own ids", &IDMaps{UID: own, GID: own}, "--map-user=0 --map-group=0"},
		{"own ids and ranges", &IDMaps{UID: withRange, GID: withRange}, "--map-user=0 --map-users=100000,1,65536 --map-group=0 --map-groups=100000,1,65536"},
		{"no gid map", &IDMaps{UID: own}, ""},
		{"not the own id first", &IDMaps{UID: []IDMap{{Inner: 0, Outer: 1001, Count: 1}}, GID: own}, ""},
		{"own id as a range", &IDMaps{UID: []IDMap{{Inner: 0, Outer: 1000, Count: 2}}, GID: own}, ""},
		{"two ranges", &IDMaps{UID: append(withRange, IDMap{Inner: 70000, Outer: 300000, Count: 10}), GID: own}, ""},
		{"empty range", &IDMaps{UID: append(own, IDMap{Inner: 1, Outer: 100000}), GID: own}, ""},
	} {
		opts, ok := unshareMapOptions(c.maps, 1000, 1000)
		if got := strings.Join(opts, " "); got != c.want || ok != (c.want != "") {
			t.Errorf("%s: %q %v, want %q", c.name, got, ok, c.want)
		}
	}
}

// TestHeldWrapperRefusesAnotherTarget: a held wrapper goes on in place
// only as its own executable; a binary that cannot go on in place refuses
// the role. Neither waits at the barrier.
func TestHeldWrapperRefusesAnotherTarget(t *testing.T) {
	b := testBroker(t)
	out := filepath.Join(t.TempDir(), "out")
	br, bw, _ := os.Pipe()
	defer bw.Close()
	exe, _ := os.Executable()
	c, err := b.Start("wrapper", Command{Path: exe, Args: []string{"w", WrapperArg, HeldArg, "--barrier-fd=3", "--", "/bin/sh", "-c", "touch " + out}, Files: []*os.File{nil, nil, nil, br}})
	if err != nil {
		t.Fatal(err)
	}
	br.Close()
	if st, _ := c.Wait(context.Background()); st.Code != wrapperAbort {
		t.Errorf("wrapper status %v, want %d", st, wrapperAbort)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a held wrapper ran another program")
	}
	done := make(chan int)
	go func() { // runWrapper locks its goroutine's thread
		argv, code := runWrapper([]string{HeldArg, "--barrier-fd=3", "--", exe}, false)
		if argv != nil {
			code = -1
		}
		done <- code
	}()
	if code := <-done; code != wrapperAbort {
		t.Errorf("a wrapper that cannot go on in place returned %d, want %d", code, wrapperAbort)
	}
}
