package pidfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestIdentityOfSelfIsStable(t *testing.T) {
	a, err := Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Identity().Authority != b.Identity().Authority {
		t.Fatalf("reopen of the same live process changed authority: %v vs %v", a.Identity(), b.Identity())
	}
	if a.Identity().StartTimeTicks == 0 || a.Identity().HostPID != uint32(os.Getpid()) {
		t.Errorf("identity %v", a.Identity())
	}
	if !a.Matches(b.Identity().Authority) {
		t.Error("Matches false for equal authority")
	}
}

func TestDistinctProcessesAndStaleHandles(t *testing.T) {
	c := exec.Command("/bin/sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	h, err := Open(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := Open(os.Getpid())
	if h.Identity().Authority == self.Identity().Authority {
		t.Fatal("two live processes share an authority")
	}
	if h.Identity().Ino <= self.Identity().Ino {
		t.Errorf("later process has a smaller pidfs inode: %d <= %d", h.Identity().Ino, self.Identity().Ino)
	}
	if !h.Alive() {
		t.Fatal("live process not alive")
	}
	if err := h.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait() // reaped by os/exec in this test only
	if err := h.Signal(unix.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("signal through a stale handle: %v", err)
	}
	if h.Alive() {
		t.Fatal("reaped process alive")
	}
}

func TestBootIDParse(t *testing.T) {
	id, err := ParseBootID("09db016b-9c56-43b8-ae1a-d537faaf0949")
	if err != nil || id.String() != "09db016b-9c56-43b8-ae1a-d537faaf0949" || id[0] != 0x09 || id[15] != 0x49 {
		t.Fatalf("%v %v", id, err)
	}
	for _, bad := range []string{"", "09db016b9c5643b8ae1ad537faaf0949", "zzdb016b-9c56-43b8-ae1a-d537faaf0949"} {
		if _, err := ParseBootID(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	cur, err := CurrentBootID()
	if err != nil || cur == (BootID{}) {
		t.Fatalf("current boot id %v %v", cur, err)
	}
}

func TestNetNamespaceThroughPidfd(t *testing.T) {
	h, err := Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dev, ino, err := h.NetNamespace()
	if err != nil {
		t.Fatal(err)
	}
	pdev, pino, err := NamespaceOfPath("/proc/self/ns/net")
	if err != nil || pdev != dev || pino != ino {
		t.Fatalf("pidfd netns %d:%d, path %d:%d %v", dev, ino, pdev, pino, err)
	}
	// The UTS namespace file differs: the ioctl is the net one.
	_, uino, _ := NamespaceOfPath("/proc/self/ns/uts")
	if uino == ino {
		t.Fatal("netns ioctl returned the UTS namespace")
	}
}

func TestStartTimeTicks(t *testing.T) {
	st, err := StartTimeTicks(os.Getpid())
	if err != nil || st == 0 {
		t.Fatalf("%d %v", st, err)
	}
	if _, err := StartTimeTicks(0x7ffffff0); err == nil {
		t.Fatal("missing pid read")
	}
}

func TestRecoveryMatch(t *testing.T) {
	c := exec.Command("/bin/sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	h, err := Open(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	id := h.Identity()
	m, err := RecoveryMatch(id)
	if err != nil || !m.Matches(id.Authority) {
		t.Fatalf("live exact process: %v", err)
	}
	m.Close()
	other := id
	other.BootID[0] ^= 0xff
	if _, err := RecoveryMatch(other); !errors.Is(err, ErrBootFenced) {
		t.Errorf("other boot: %v", err)
	}
	wrong := id
	wrong.Ino++
	if _, err := RecoveryMatch(wrong); !errors.Is(err, ErrMismatch) {
		t.Errorf("same pid, other identity: %v", err)
	}
	skew := id
	skew.StartTimeTicks++
	if _, err := RecoveryMatch(skew); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("start time mismatch: %v", err)
	}
	h.Signal(unix.SIGKILL)
	// Exited, not yet reaped (a zombie): the exact pidfd reports it
	// terminated. A start-time observation that disagrees (as one read
	// after a reap does: unreadable, or the pid's next owner's) then
	// proves the recorded process gone instead of refusing as ambiguous.
	if done, err := h.WaitTerminated(10 * time.Second); err != nil || !done {
		t.Fatalf("killed process not terminated: %v %v", done, err)
	}
	if _, err := RecoveryMatch(skew); !errors.Is(err, ErrExited) {
		t.Errorf("start time mismatch of a process that exited: %v", err)
	}
	if m, err := RecoveryLive(skew); m != nil || err != nil {
		t.Errorf("RecoveryLive of a process that exited during the lookup: %v %v", m, err)
	}
	c.Wait()
	if _, err := RecoveryMatch(id); !errors.Is(err, ErrAbsent) && !errors.Is(err, ErrMismatch) {
		t.Errorf("reaped process: %v", err)
	}
	noPid := id
	noPid.HostPID = 0
	if _, err := RecoveryMatch(noPid); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("no locator: %v", err)
	}
}

// TestOpenChildOf: a grandchild is proven the child of its exact parent
// through its own pidfd; any other process at a locator is ErrNotChild and
// an absent one ErrAbsent. Terminated and WaitTerminated observe its exit
// without reaping it (the parent does).
func TestOpenChildOf(t *testing.T) {
	c := exec.Command("/bin/sh", "-c", "/bin/sleep 60 & echo $!; wait")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	defer c.Process.Kill()
	var grand int
	if _, err := fmt.Fscan(out, &grand); err != nil {
		t.Fatal(err)
	}
	parent, err := Open(c.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	h, err := OpenChildOf(parent, grand)
	if err != nil {
		t.Fatalf("grandchild %d not proven a child of %d: %v", grand, c.Process.Pid, err)
	}
	defer h.Close()
	if _, err := OpenChildOf(parent, os.Getpid()); !errors.Is(err, ErrNotChild) || !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("this test process as the child of sh: %v", err)
	}
	if _, err := OpenChildOf(parent, 0); !errors.Is(err, ErrAbsent) {
		t.Fatalf("pid 0: %v", err)
	}
	if done, err := h.Terminated(); err != nil || done {
		t.Fatalf("live grandchild terminated=%v err=%v", done, err)
	}
	if done, err := h.WaitTerminated(50 * time.Millisecond); err != nil || done {
		t.Fatalf("live grandchild after a short wait: terminated=%v err=%v", done, err)
	}
	if err := h.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if done, err := h.WaitTerminated(5 * time.Second); err != nil || !done {
		t.Fatalf("killed grandchild: terminated=%v err=%v", done, err)
	}
	if done, err := h.Terminated(); err != nil || !done {
		t.Fatalf("killed grandchild: terminated=%v err=%v", done, err)
	}
	if _, err := h.ParentPID(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("ParentPID of an exited process: %v", err)
	}
}

// TestAwaitLocatorsGone: a live process at a locator is reported, never
// signalled; an exiting one and an absent pid are not.
func TestAwaitLocatorsGone(t *testing.T) {
	live := exec.Command("/bin/sleep", "30")
	short := exec.Command("/bin/sleep", "0.2")
	for _, c := range []*exec.Cmd{live, short} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	defer live.Wait()
	defer live.Process.Kill()
	go short.Wait() // reaped by os/exec in this test only
	held, err := AwaitLocatorsGone([]int{0, live.Process.Pid, short.Process.Pid, -1}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0] != live.Process.Pid {
		t.Fatalf("held %v, want [%d]", held, live.Process.Pid)
	}
	h, err := Open(live.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if done, _ := h.Terminated(); done {
		t.Fatal("AwaitLocatorsGone ended the live process")
	}
}

// TestParentPIDFromProc: the pre-6.13 path reads the same parent as
// PIDFD_GET_INFO, and a process that exited reports ErrProcessDone.
func TestParentPIDFromProc(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	h, err := Open(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got, err := h.parentPIDFromProc()
	if err != nil || got != os.Getpid() {
		t.Fatalf("parentPIDFromProc = %d, %v; want %d", got, err, os.Getpid())
	}
	if want, err := h.ParentPID(); err != nil || want != got {
		t.Errorf("ParentPID = %d, %v", want, err)
	}
	cmd.Process.Kill() // the child this test started
	for i := 0; i < 100; i++ {
		if done, _ := h.Terminated(); done {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := h.parentPIDFromProc(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("after exit: %v, want ErrProcessDone", err)
	}
	if _, err := parsePPid([]byte("42 (a) b) c) S 7 42 42"), 42); err != nil {
		t.Errorf("parsePPid with parentheses in the name: %v", err)
	}
	if p, _ := parsePPid([]byte("42 (a) b) c) S 7 42 42"), 42); p != 7 {
		t.Errorf("parsePPid = %d, want 7", p)
	}
}
