// Package slirp is the Domain's connectivity helper: slirp4netns giving the
// Runtime Supervisor's network namespace a tap device whose traffic leaves
// through the host network namespace (spec §3.6, FR-16).
//
// The Host Coordinator acquires the helper through its causal broker. The
// acquired process is an exec chain, each link exec'ing the next in the
// same process (so the pidfs identity staged by the broker is the helper's):
//
//	nsenter --user=/proc/<RS>/ns/user --preserve-credentials --
//	  lazaret-gitroute __lazaret-slirp --resolv-conf=FILE --
//	    slirp4netns --configure --mtu=65520 --disable-host-loopback
//	      --enable-sandbox --enable-seccomp --cidr=C --exit-fd=3 --ready-fd=4
//	      --api-socket=<runtime dir>/slirp.sock <RS pid> tap0
//
// The API socket (api.go) adds host port forwards to the running helper;
// it lives in the Domain's 0700 runtime directory.
//
// Why the chain (measured on the qualified kernels): slirp4netns's
// built-in DNS forwarder forwards to the nameservers of the /etc/resolv.conf
// it sees, and its --enable-sandbox binds /etc from its mount namespace; an
// unprivileged host process cannot have a private mount namespace. Entering
// the Runtime Supervisor's user namespace (whose root is the developer)
// gives the link the right to unshare a mount namespace and bind the
// Domain's per-generation resolv.conf over /etc/resolv.conf, while the
// network namespace stays the host's. nsenter does the user-namespace join
// because a multithreaded Go process cannot (setns(CLONE_NEWUSER)).
// slirp4netns then joins the supervisor's network namespace by pid, so
// --enable-sandbox and --enable-seccomp work.
//
// Exit coupling: the broker arms PDEATHSIG before the chain runs (in its
// exec-stop child; it survives the user-namespace join, which the owner's
// euid makes a subset of its credentials, and the unprivileged execs),
// and --exit-fd is a pipe whose write end only the coordinator holds, so
// the helper exits when the coordinator does, even after SIGKILL; on normal
// teardown the coordinator closes the pipe, waits, and kills the exact
// process through its pidfd if it lingers.
package slirp

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/lazaret/lazaret/pkg/mountns"
)

// RoleArg selects the mount-namespace link of the chain, hosted by
// lazaret-gitroute, the smallest host binary.
const RoleArg = "__lazaret-slirp"

// Tap is the helper's device in the supervisor's network namespace.
const Tap = "tap0"

// MTU of the tap device (slirp4netns's maximum, for throughput).
const MTU = 65520

// DefaultCIDR is the helper's subnet. Its connected route is more specific
// than the 10/8 deny, so the gateway and DNS forwarder stay reachable.
var DefaultCIDR = netip.MustParsePrefix("10.0.2.0/24")

// Network is the helper's addressing, derived from its CIDR the way
// slirp4netns does (gateway .2, DNS forwarder .3, guest .100).
type Network struct {
	CIDR    netip.Prefix
	Gateway netip.Addr
	DNS     netip.Addr
	Guest   netip.Addr
}

// NetworkFor derives the addressing of cidr (an IPv4 /24 or larger).
func NetworkFor(cidr netip.Prefix) (Network, error) {
	if !cidr.Addr().Is4() || cidr.Bits() > 24 || cidr.Masked() != cidr {
		return Network{}, fmt.Errorf("connectivity helper CIDR %s: need an IPv4 network prefix of /24 or larger", cidr)
	}
	b := cidr.Addr().As4()
	at := func(last byte) netip.Addr { c := b; c[3] = last; return netip.AddrFrom4(c) }
	return Network{CIDR: cidr, Gateway: at(2), DNS: at(3), Guest: at(100)}, nil
}

// Chain is everything needed to build the acquired command line.
type Chain struct {
	Nsenter, Self, Slirp string // executable paths
	ResolvConf           string // per-generation file bound over /etc/resolv.conf
	SupervisorPID        int
	Network              Network
	ExitFD, ReadyFD      int
	// APISocket, when set, is where slirp4netns listens for its JSON API
	// (host forwarding of ports), in the Domain's private runtime
	// directory. It is bound before slirp4netns enters its sandbox.
	APISocket string
}

// Argv is the acquired command line (argv[0] is nsenter).
func (c Chain) Argv() []string {
	pid := strconv.Itoa(c.SupervisorPID)
	argv := []string{
		"nsenter", "--user=/proc/" + pid + "/ns/user", "--preserve-credentials", "--",
		c.Self, RoleArg, "--resolv-conf=" + c.ResolvConf, "--",
		c.Slirp, "--configure", "--mtu=" + strconv.Itoa(MTU), "--disable-host-loopback",
		"--enable-sandbox", "--enable-seccomp", "--cidr=" + c.Network.CIDR.String(),
		"--exit-fd=" + strconv.Itoa(c.ExitFD), "--ready-fd=" + strconv.Itoa(c.ReadyFD),
	}
	if c.APISocket != "" {
		argv = append(argv, "--api-socket="+c.APISocket)
	}
	return append(argv, pid, Tap)
}

// ResolvConf is the helper's resolv.conf naming the Domain's resolvers.
func ResolvConf(resolvers []netip.Addr) []byte {
	var b strings.Builder
	b.WriteString("# Lazaret connectivity helper: the Domain's DNS resolvers\n")
	for _, a := range resolvers {
		fmt.Fprintf(&b, "nameserver %s\n", a)
	}
	return []byte(b.String())
}

// MaybeRunRole runs the mount-namespace link when this binary was exec'd
// as it, and never returns then.
func MaybeRunRole() {
	if len(os.Args) < 2 || os.Args[1] != RoleArg {
		return
	}
	os.Exit(roleMain(os.Args[2:]))
}

func roleMain(args []string) int {
	fs := flag.NewFlagSet(RoleArg, flag.ContinueOnError)
	resolv := fs.String("resolv-conf", "", "file to bind over /etc/resolv.conf")
	if err := fs.Parse(args); err != nil {
		return 125
	}
	argv := fs.Args()
	if *resolv == "" || len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "lazaret-gitroute "+RoleArg+": usage: --resolv-conf=FILE -- PROGRAM ARGS... (started by the Host Coordinator only)")
		return 125
	}
	// The new mount namespace is the locked thread's; exec from it.
	runtime.LockOSThread()
	if err := mountns.EnterPrivateWithFile(*resolv, "/etc/resolv.conf"); err != nil {
		fmt.Fprintf(os.Stderr, "lazaret-gitroute %s: %v\n", RoleArg, err)
		return 125
	}
	err := syscall.Exec(argv[0], argv, os.Environ())
	fmt.Fprintf(os.Stderr, "lazaret-gitroute %s: exec %s: %v\n", RoleArg, argv[0], err)
	return 127
}
