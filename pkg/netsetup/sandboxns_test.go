package netsetup

import (
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// childEnv selects the part of TestSandboxNamespace that runs inside a
// private network namespace (the test re-executes itself under unshare).
const childEnv = "LAZARET_NETSETUP_TEST_CHILD"

// leaderChild is childEnv's value for a child whose main goroutine
// serves onLeader: it stays locked to the thread-group leader, the thread
// it started on. Other children leave the leader to the scheduler.
const leaderChild = "leader"

// onLeader runs functions on the thread-group leader in a leaderChild.
var onLeader = make(chan func())

func init() {
	if os.Getenv(childEnv) == leaderChild {
		runtime.LockOSThread() // init runs on the leader: keep it for TestMain
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != leaderChild {
		os.Exit(m.Run())
	}
	go func() { os.Exit(m.Run()) }()
	for f := range onLeader {
		f()
	}
}

// runOnLeader runs f on the thread-group leader and returns its error.
func runOnLeader(f func() error) error {
	errc := make(chan error, 1)
	onLeader <- func() { errc <- f() }
	return <-errc
}

// inPrivateNetns re-executes the test named name under unshare --net (as
// root), with childEnv set to mode, and fails unless it passed there; it
// reports whether the caller is that re-executed child, which then runs
// the test's body.
func inPrivateNetns(t *testing.T, name, mode string) bool {
	if os.Getenv(childEnv) != "" {
		return true
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root (a private network namespace through unshare --net): run the unit tests as root, as make unit does")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare(1) (util-linux) is missing: %v", err)
	}
	cmd := exec.Command(unshare, "--net", os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("in a private network namespace: %v\n%s", err, out)
	}
	return false
}

// childSetup prepares a re-executed child's private network namespace
// (lo up, four Ps) and returns the namespace's identity.
func childSetup(t *testing.T) unix.Stat_t {
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	if err := LoopbackUp(); err != nil {
		t.Fatal(err)
	}
	runtime.GOMAXPROCS(4)
	return self
}

// TestSandboxNamespace: the sandbox namespace is held by a thread other
// than the thread-group leader (so /proc/<pid>/ns/net, which the
// coordinator verifies, stays the process's own, however the scheduler
// placed the goroutines), it gets the veth pair and only the connected
// route, and its path names it. It runs in a network namespace of its
// own: the veth pair never touches the host's.
func TestSandboxNamespace(t *testing.T) {
	if !inPrivateNetns(t, "TestSandboxNamespace", "1") {
		return
	}
	// Many namespaces, with the main goroutine parked so the scheduler
	// is free to place a holder on the leader thread.
	self := childSetup(t)
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

// TestConfigureKeepsTheLeaderInItsNamespace: building the veth pair never
// moves the calling thread into the sandbox namespace, not even for a
// moment, even when that thread is the thread-group leader. Its
// /proc/<pid>/ns/net is what the connectivity helper joins by the Runtime
// Supervisor's pid (slirp4netns configures its tap and default route
// there) and what the coordinator verifies: a leader briefly in the
// sandbox namespace (a setns there and back to open a netlink socket)
// once let the helper put the tap and its default route into the
// sandbox's namespace, around the egress proxy. Another thread watches
// the leader's namespace while Configure runs on the leader, many times.
func TestConfigureKeepsTheLeaderInItsNamespace(t *testing.T) {
	if !inPrivateNetns(t, "TestConfigureKeepsTheLeaderInItsNamespace", leaderChild) {
		return
	}
	self := childSetup(t)
	var stop, moved, samples atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		leader := "/proc/" + strconv.Itoa(os.Getpid()) + "/ns/net"
		for stop.Load() == 0 {
			var st unix.Stat_t
			if unix.Stat(leader, &st) == nil && st.Ino != self.Ino {
				moved.Add(1)
			}
			samples.Add(1)
		}
	}()
	proxy, sandbox := netip.MustParseAddr("10.0.3.1"), netip.MustParseAddr("10.0.3.2")
	for i := 0; i < 60; i++ {
		n, err := NewSandboxNamespace()
		if err != nil {
			t.Fatal(err)
		}
		err = runOnLeader(func() error {
			if unix.Gettid() != os.Getpid() {
				t.Errorf("the leader helper runs on thread %d, not the leader", unix.Gettid())
			}
			return n.Configure(proxy, sandbox, 30)
		})
		if err != nil {
			t.Fatalf("configure %d: %v", i, err)
		}
		l, err := netlink.LinkByName(ProxyLink)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkDel(l); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(1)
	<-done
	if m := moved.Load(); m != 0 {
		t.Fatalf("the thread-group leader was seen in another network namespace in %d of %d samples while Configure ran on it", m, samples.Load())
	}
	t.Logf("%d samples of the leader's namespace during 60 Configure calls on it, all its own", samples.Load())
}
