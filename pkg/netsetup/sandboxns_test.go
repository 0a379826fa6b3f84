package netsetup

import (
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// childEnv selects the part of TestSandboxNamespace that runs inside a
// private network namespace (the test re-executes itself under unshare).
const childEnv = "LAZARET_NETSETUP_TEST_CHILD"

// TestSandboxNamespace: the sandbox namespace is held by a thread other
// than the thread-group leader (so /proc/<pid>/ns/net, which the
// coordinator verifies, stays the process's own, however the scheduler
// placed the goroutines), it gets the veth pair and only the connected
// route, and its path names it. It runs in a network namespace of its
// own: the veth pair never touches the host's.
func TestSandboxNamespace(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		if os.Geteuid() != 0 {
			t.Fatal("needs root (a private network namespace through unshare --net): run the unit tests as root, as make unit does")
		}
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Fatalf("unshare(1) (util-linux) is missing: %v", err)
		}
		cmd := exec.Command(unshare, "--net", os.Args[0], "-test.run=^TestSandboxNamespace$", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestSandboxNamespace") {
			t.Fatalf("in a private network namespace: %v\n%s", err, out)
		}
		return
	}
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	if err := LoopbackUp(); err != nil {
		t.Fatal(err)
	}
	// Many namespaces, with the main goroutine parked so the scheduler
	// is free to place a holder on the leader thread.
	runtime.GOMAXPROCS(4)
	var last *SandboxNamespace
	for i := 0; i < 24; i++ {
		n, err := NewSandboxNamespace()
		if err != nil {
			t.Fatal(err)
		}
		if n.TID() == os.Getpid() {
			t.Fatalf("namespace %d is held by the thread-group leader", i)
		}
		var now unix.Stat_t
		if err := unix.Stat("/proc/self/ns/net", &now); err != nil || now.Ino != self.Ino {
			t.Fatalf("after namespace %d the process's namespace is %d, not %d (%v)", i, now.Ino, self.Ino, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(n.Path(), &st); err != nil {
			t.Fatal(err)
		}
		if dev, ino := n.Identity(); st.Dev != dev || st.Ino != ino || ino == self.Ino {
			t.Fatalf("path %s is %d:%d, identity %d:%d, process %d", n.Path(), st.Dev, st.Ino, dev, ino, self.Ino)
		}
		last = n
	}
	proxy, sandbox := netip.MustParseAddr("10.0.3.1"), netip.MustParseAddr("10.0.3.2")
	if err := last.Configure(proxy, sandbox, 30); err != nil {
		t.Fatal(err)
	}
	routes, err := last.Routes()
	if err != nil {
		t.Fatal(err)
	}
	connected := netip.MustParsePrefix("10.0.3.0/30")
	if err := VerifySandboxRoutes(routes, connected); err != nil {
		t.Fatalf("%v (%v)", err, routes)
	}
	if err := VerifySandboxRoutes(append(routes, Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Dev: SandboxLink}), connected); err == nil {
		t.Error("a default route in the sandbox namespace was accepted")
	}
	if a, err := InterfaceAddress(ProxyLink); err != nil || a != netip.PrefixFrom(proxy, 30) {
		t.Errorf("%s here: %v %v", ProxyLink, a, err)
	}
}
