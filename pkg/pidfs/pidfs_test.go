package pidfs

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
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
