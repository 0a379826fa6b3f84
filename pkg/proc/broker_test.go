package proc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

// The test binary doubles as the wrapper, as the target of an in-place
// acquisition (inPlaceEnv) and as the parent-death step's broker (the same
// roles the lazaret binary answers for the suite).
func TestMain(m *testing.M) {
	MaybeRunWrapperInPlace()
	if out := os.Getenv(inPlaceEnv); out != "" {
		os.Exit(inPlaceTarget(out))
	}
	MaybeRunQualifyBroker()
	os.Exit(m.Run())
}

func testBroker(t *testing.T) *Broker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBroker(slog.New(slog.NewTextHandler(io.Discard, nil)), exe)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// barriers are the two acquisition barriers; the exec-stop one is called
// directly, so a host without ptrace fails here instead of falling back.
var barriers = map[string]func(*Broker) func(context.Context, AcquireSpec) (*Child, error){
	"wrapper":   func(b *Broker) func(context.Context, AcquireSpec) (*Child, error) { return b.Acquire },
	"exec-stop": func(b *Broker) func(context.Context, AcquireSpec) (*Child, error) { return b.acquireExecStop },
}

func TestAcquireRunsTargetAfterStaging(t *testing.T) {
	for name, acquire := range barriers {
		t.Run(name, func(t *testing.T) { testAcquireRunsTargetAfterStaging(t, acquire) })
	}
}

func testAcquireRunsTargetAfterStaging(t *testing.T, acquire func(*Broker) func(context.Context, AcquireSpec) (*Child, error)) {
	b := testBroker(t)
	out := filepath.Join(t.TempDir(), "out")
	var staged pidfs.Identity
	c, err := acquire(b)(context.Background(), AcquireSpec{
		Slot:   "t",
		Target: Command{Path: "/bin/sh", Args: []string{"sh", "-c", "echo $$ > " + out + "; exit 3"}},
		Stage: func(ctx context.Context, id pidfs.Identity) error {
			staged = id
			if _, err := os.Stat(out); err == nil {
				t.Error("target ran before the barrier was released")
			}
			return nil
		},
	})
	exitedWith3(t, c, err)
	b1, _ := os.ReadFile(out)
	if strings.TrimSpace(string(b1)) != strconv.Itoa(int(staged.HostPID)) {
		t.Errorf("target pid %q is not the staged wrapper pid %d (exec must be in place)", b1, staged.HostPID)
	}
	if c.Identity() != staged {
		t.Errorf("identity changed between staging and child")
	}
	if err := c.Signal(unix.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal after reap: %v", err)
	}
}

func TestStageFailureNeverRunsTarget(t *testing.T) {
	for name, acquire := range barriers {
		t.Run(name, func(t *testing.T) { testStageFailureNeverRunsTarget(t, acquire) })
	}
}

func testStageFailureNeverRunsTarget(t *testing.T, acquire func(*Broker) func(context.Context, AcquireSpec) (*Child, error)) {
	b := testBroker(t)
	out := filepath.Join(t.TempDir(), "out")
	_, err := acquire(b)(context.Background(), AcquireSpec{
		Slot:   "t",
		Target: Command{Path: "/bin/sh", Args: []string{"sh", "-c", "touch " + out}},
		Stage:  func(context.Context, pidfs.Identity) error { return errors.New("store refused") },
	})
	refusedStageNeverRan(t, err, out)
}

// exitedWith3 waits for the child of an acquisition (err its error) whose
// target exits with status 3.
func exitedWith3(t *testing.T, c *Child, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(context.Background())
	if err != nil || !st.Exited || st.Code != 3 {
		t.Fatalf("status %v %v", st, err)
	}
}

// refusedStageNeverRan checks an acquisition whose stage refused with
// "store refused": that error is returned, and the target, which would
// have created out, never ran.
func refusedStageNeverRan(t *testing.T, err error, out string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "store refused") {
		t.Fatalf("err %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(out); err == nil {
		t.Fatal("target ran although staging failed")
	}
}

func TestWrapperRefusesForeignParentAuthority(t *testing.T) {
	b := testBroker(t)
	out := filepath.Join(t.TempDir(), "out")
	br, bw, _ := os.Pipe()
	exe, _ := os.Executable()
	c, err := b.Start("wrapper", Command{Path: exe, Args: []string{"w", WrapperArg, "--barrier-fd=3", "--", "/bin/sh", "-c", "touch " + out}, Files: []*os.File{nil, nil, nil, br}})
	if err != nil {
		t.Fatal(err)
	}
	br.Close()
	wrong := b.Self()
	wrong.Ino++ // not our pidfs inode
	bw.Write(encodeRelease(wrong))
	bw.Close()
	st, _ := c.Wait(context.Background())
	if st.Code != wrapperAbort {
		t.Errorf("wrapper status %v, want %d", st, wrapperAbort)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("target ran under a mismatched parent authority")
	}
}

func TestWrapperFailsClosed(t *testing.T) {
	b := testBroker(t)
	exe, _ := os.Executable()
	for name, release := range map[string][]byte{
		"eof":       nil,
		"short":     encodeRelease(b.Self())[:10],
		"malformed": append([]byte("XXXXXXXX"), encodeRelease(b.Self())[8:]...),
		"too long":  append(encodeRelease(b.Self()), 0),
	} {
		br, bw, _ := os.Pipe()
		out := filepath.Join(t.TempDir(), "out")
		c, err := b.Start("wrapper", Command{Path: exe, Args: []string{"w", WrapperArg, "--barrier-fd=3", "--", "/bin/sh", "-c", "touch " + out}, Files: []*os.File{nil, nil, nil, br}})
		if err != nil {
			t.Fatal(err)
		}
		br.Close()
		bw.Write(release)
		bw.Close()
		st, _ := c.Wait(context.Background())
		if st.Code != wrapperAbort {
			t.Errorf("%s: status %v", name, st)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: target ran", name)
		}
	}
}

// TestParentDeathKillsTarget (spec §3.2, causal acquisition): when the broker process
// dies, the acquired target dies with it — the qualification suite's step.
func TestParentDeathKillsTarget(t *testing.T) {
	for _, mode := range BarrierModes {
		t.Run(mode, func(t *testing.T) {
			if err := testBroker(t).ParentDeathKillsTarget(context.Background(), mode); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOutputCapturesAndBounds(t *testing.T) {
	b := testBroker(t)
	out, errb, st, err := b.Output(context.Background(), "sh", Command{Path: "/bin/sh", Args: []string{"sh", "-c", "echo out; echo err >&2; head -c 100000 /dev/zero; exit 4"}}, 1000)
	if err != nil || st.Code != 4 || len(out) != 1000 || !strings.HasPrefix(string(out), "out\n") || string(errb) != "err\n" {
		t.Fatalf("out %d %q err %q st %v %v", len(out), out[:4], errb, st, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, _, err = b.Output(ctx, "sleep", Command{Path: "/bin/sleep", Args: []string{"sleep", "30"}}, 10)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: %v", err)
	}
	_, _, st, _ = b.Output(context.Background(), "kill", Command{Path: "/bin/sh", Args: []string{"sh", "-c", "kill -KILL $$"}}, 10)
	if st.Exited || st.Signal != unix.SIGKILL || st.ShellCode() != 137 {
		t.Fatalf("signal status %v", st)
	}
}

func TestReleaseCodec(t *testing.T) {
	a := pidfs.Authority{Dev: 5, Ino: ^uint64(0)}
	a.BootID[0], a.BootID[15] = 1, 0xff
	got, ok := decodeRelease(encodeRelease(a))
	if !ok || got != a {
		t.Fatalf("round trip %v %v", got, ok)
	}
	if _, ok := decodeRelease([]byte("short")); ok {
		t.Fatal("short release decoded")
	}
}

func TestPrivilegedExecUsesWrapper(t *testing.T) {
	if privilegedExec("/bin/true") {
		t.Error("/bin/true is not privileged")
	}
	found := false
	for _, p := range []string{"/usr/bin/su", "/bin/su", "/usr/bin/passwd", "/usr/bin/newuidmap", "/usr/bin/ping"} {
		st, err := os.Stat(p)
		if err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid) == 0 {
			continue
		}
		found = true
		if !privilegedExec(p) {
			t.Errorf("%s is set-user-ID but not privileged", p)
		}
	}
	if !found {
		t.Fatal("no set-user-ID program on this host to test with (newuidmap is a Lazaret dependency): install uidmap")
	}
}
