package pidfs

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
)

// TestNamespaceHolders: this process is found in its own mount namespace;
// a namespace identity no process has is reported without holders.
func TestNamespaceHolders(t *testing.T) {
	dev, ino, err := NamespaceOfPath("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	pids, _, _, err := NamespaceHolders("mnt", dev, ino, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("own mount namespace %d:%d: holders %v lack pid %d", dev, ino, pids, os.Getpid())
	}
	pids, binds, _, err := NamespaceHolders("mnt", dev, 1, 0)
	if err != nil || len(pids) != 0 || len(binds) != 0 {
		t.Fatalf("absent namespace: pids %v binds %v err %v", pids, binds, err)
	}
	if _, _, _, err := NamespaceHolders("mnt", 0, ino, 0); err == nil {
		t.Fatal("incomplete identity accepted")
	}
}

// startInNewMountNamespace starts sleep in a new user and mount namespace.
func startInNewMountNamespace(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestMountNamespaceID: the kernel's mount namespace ID is equal for the
// same namespace (by path and through the pidfd) and differs between two
// namespaces created one after another, even where the second reuses the
// first's nsfs inode. The holder scan decides by the ID: a process whose
// namespace has the recorded (dev, ino) but another ID is no holder.
func TestMountNamespaceID(t *testing.T) {
	dev, ino, own, err := MountNamespaceOfPath("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if own == 0 {
		t.Fatal("no mount namespace ID on a kernel Lazaret supports (NS_GET_MNTNS_ID is Linux 6.8)")
	}
	if d2, i2, again, err := MountNamespaceOfPath("/proc/self/ns/mnt"); err != nil || again != own || d2 != dev || i2 != ino {
		t.Fatalf("own mount namespace read twice: %d:%d ID %d then %d:%d ID %d (%v)", dev, ino, own, d2, i2, again, err)
	}
	if pids, _, _, err := NamespaceHolders("mnt", dev, ino, own); err != nil || !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("own mount namespace by ID %d: holders %v (%v)", own, pids, err)
	}

	a := startInNewMountNamespace(t)
	devA, inoA, idA, err := MountNamespaceOfPath(fmt.Sprintf("/proc/%d/ns/mnt", a.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(a.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if d, i, id, err := h.MountNamespace(); err != nil || d != devA || i != inoA || id != idA {
		t.Fatalf("through the pidfd: %d:%d ID %d (%v), by path %d:%d ID %d", d, i, id, err, devA, inoA, idA)
	}
	h.Close()
	if idA == own || idA == 0 {
		t.Fatalf("new mount namespace ID %d, own %d", idA, own)
	}
	a.Process.Kill()
	a.Wait()

	// The next namespace: the kernel typically hands it A's freed inode.
	b := startInNewMountNamespace(t)
	devB, inoB, idB, err := MountNamespaceOfPath(fmt.Sprintf("/proc/%d/ns/mnt", b.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("namespace A %d:%d ID %d, namespace B %d:%d ID %d (inode reused: %v)", devA, inoA, idA, devB, inoB, idB, devA == devB && inoA == inoB)
	if idB == idA || idB == own || idB == 0 {
		t.Fatalf("second mount namespace ID %d, first %d, own %d", idB, idA, own)
	}
	// A record of A naming B's (dev, ino) — the inode reuse — finds no holder.
	pids, binds, _, err := NamespaceHolders("mnt", devB, inoB, idA)
	if err != nil || slices.Contains(pids, b.Process.Pid) || len(binds) != 0 {
		t.Fatalf("namespace %d:%d with A's ID %d: holders %v binds %v (%v); B is pid %d in ID %d", devB, inoB, idA, pids, binds, err, b.Process.Pid, idB)
	}
	// Without an ID (an older record) the (dev, ino) match stands.
	if pids, _, _, err := NamespaceHolders("mnt", devB, inoB, 0); err != nil || !slices.Contains(pids, b.Process.Pid) {
		t.Fatalf("namespace %d:%d without an ID: holders %v (%v), want pid %d", devB, inoB, pids, err, b.Process.Pid)
	}
	if pids, _, _, err := NamespaceHolders("mnt", devB, inoB, idB); err != nil || !slices.Equal(pids, []int{b.Process.Pid}) {
		t.Fatalf("namespace %d:%d ID %d: holders %v (%v), want only pid %d", devB, inoB, idB, pids, err, b.Process.Pid)
	}
	if _, _, _, err := NamespaceHolders("net", dev, ino, own); err == nil {
		t.Fatal("a mount namespace ID accepted for a network namespace scan")
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/t\`: `/t\`} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
