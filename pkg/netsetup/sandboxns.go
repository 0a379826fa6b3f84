package netsetup

import (
	"errors"
	"fmt"

	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Interface names of the allowlist mode's veth pair: ProxyLink stays in
// the Runtime Supervisor's namespace (where the egress proxy listens and
// the connectivity helper's tap is), SandboxLink is moved into the
// sandbox's namespace.
const (
	ProxyLink   = "lzp0"
	SandboxLink = "lzs0"
)

// SandboxNamespace is the sandbox's own network namespace in the allowlist
// mode: only lo and the veth end toward the egress proxy, no default
// route, so every destination but the proxy fails at once with
// ENETUNREACH. A dedicated locked thread of this process lives in it for
// the process's lifetime (runsc joins it by that thread's
// /proc/<pid>/task/<tid>/ns/net); every configuration step that must run
// inside it (sysctls, lo, the netlink socket that configures its end of
// the veth pair) runs on that thread. No other thread ever enters it, not
// even for a moment: /proc/<pid>/ns/net, the thread-group leader's, must
// always name the process's own namespace (the connectivity helper joins
// it by pid and the coordinator verifies it).
type SandboxNamespace struct {
	tid      int
	dev, ino uint64
	calls    chan func()
}

// NewSandboxNamespace creates the namespace on a new locked thread that
// never leaves it. Precondition: CAP_SYS_ADMIN in the owning user
// namespace.
func NewSandboxNamespace() (*SandboxNamespace, error) {
	n := &SandboxNamespace{calls: make(chan func())}
	errc := make(chan error, 1)
	go n.hold(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	return n, nil
}

// hold moves a locked thread other than the thread-group leader into a
// new network namespace and serves Do on it forever. The leader must stay
// in the process's namespace: /proc/<pid>/ns/net and the process's pidfd
// name the leader's, and the coordinator verifies the Runtime Supervisor's
// namespace through them. A goroutine that finds itself on the leader keeps
// it locked (so nothing else can run there) while another one tries.
func (n *SandboxNamespace) hold(errc chan error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan error, 1)
		go n.hold(inner)
		err := <-inner // the other goroutine is on another thread now
		runtime.UnlockOSThread()
		errc <- err
		return
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		errc <- fmt.Errorf("unshare the sandbox network namespace: %w", err)
		return
	}
	n.tid = unix.Gettid()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		errc <- fmt.Errorf("stat the sandbox network namespace: %w", err)
		return
	}
	n.dev, n.ino = st.Dev, st.Ino
	errc <- nil
	for f := range n.calls {
		f()
	}
	select {} // keep the thread (and the namespace) alive; never unlocked
}

// Path names the namespace for runsc.
func (n *SandboxNamespace) Path() string {
	return fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), n.tid)
}

// TID is the thread that holds the namespace.
func (n *SandboxNamespace) TID() int { return n.tid }

// Identity is the namespace's nsfs device and inode.
func (n *SandboxNamespace) Identity() (dev, ino uint64) { return n.dev, n.ino }

// Do runs f on the thread inside the namespace.
func (n *SandboxNamespace) Do(f func() error) error {
	errc := make(chan error, 1)
	n.calls <- func() { errc <- f() }
	return <-errc
}

// Configure builds the veth pair: ProxyLink with proxy/bits here (the
// caller's namespace), SandboxLink with sandbox/bits inside, both up; lo up
// and IPv6 off inside. No route is added inside beyond the connected one.
// Precondition: CAP_NET_ADMIN in both namespaces.
func (n *SandboxNamespace) Configure(proxy, sandbox netip.Addr, bits int) error {
	if err := n.Do(func() error {
		if err := DisableIPv6(); err != nil {
			return err
		}
		return LoopbackUp()
	}); err != nil {
		return fmt.Errorf("sandbox network namespace: %w", err)
	}
	fd, err := unix.Open(n.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the sandbox network namespace: %w", err)
	}
	defer unix.Close(fd)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ProxyLink, MTU: 65520}, PeerName: SandboxLink, PeerNamespace: netlink.NsFd(fd)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create the veth pair %s/%s: %w", ProxyLink, SandboxLink, err)
	}
	here, err := netlink.LinkByName(ProxyLink)
	if err != nil {
		return fmt.Errorf("find %s: %w", ProxyLink, err)
	}
	if err := netlink.AddrAdd(here, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(proxy, bits))}); err != nil {
		return fmt.Errorf("address %s: %w", ProxyLink, err)
	}
	if err := netlink.LinkSetUp(here); err != nil {
		return fmt.Errorf("bring %s up: %w", ProxyLink, err)
	}
	// The handle's socket is opened on the namespace's own thread: a
	// netlink socket stays in the namespace it was opened in, whichever
	// thread uses it. Never a setns there and back on the calling thread
	// (netlink.NewHandleAt): were that thread the thread-group leader, for
	// that moment the process's /proc/<pid>/ns/net would be the sandbox's,
	// which is what the connectivity helper joins by this process's pid
	// to configure its tap and default route, and what the coordinator
	// verifies.
	var h *netlink.Handle
	if err := n.Do(func() error {
		var err error
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	}); err != nil {
		return fmt.Errorf("netlink in the sandbox network namespace: %w", err)
	}
	defer h.Close()
	peer, err := h.LinkByName(SandboxLink)
	if err != nil {
		return fmt.Errorf("find %s in the sandbox network namespace: %w", SandboxLink, err)
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(sandbox, bits))}); err != nil {
		return fmt.Errorf("address %s: %w", SandboxLink, err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return fmt.Errorf("bring %s up: %w", SandboxLink, err)
	}
	return nil
}

// Routes reads the namespace's main-table IPv4 routes.
func (n *SandboxNamespace) Routes() ([]Route, error) {
	var out []Route
	err := n.Do(func() error {
		var err error
		out, err = Routes()
		return err
	})
	return out, err
}

// VerifySandboxRoutes checks that the sandbox namespace routes nothing but
// the proxy's connected prefix.
func VerifySandboxRoutes(routes []Route, connected netip.Prefix) error {
	for _, r := range routes {
		if r.Dst != connected.Masked() || r.Dev != SandboxLink {
			return fmt.Errorf("the sandbox network namespace has route %s; only %s dev %s is allowed in the allowlist mode", r, connected.Masked(), SandboxLink)
		}
	}
	if len(routes) == 0 {
		return errors.New("the sandbox network namespace has no route to the egress proxy")
	}
	return nil
}
