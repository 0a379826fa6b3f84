package egress

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/capability"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/idlemem"
	"github.com/lazaret/lazaret/pkg/netpolicy"
)

// Arg selects the egress proxy role (of lazaret-hc, which RS runs it from,
// and of lazaret-rs).
const Arg = "__lazaret-egress"

// ReadyLine is printed on stdout once both listeners are bound.
const ReadyLine = "egress ready"

// Args are the role's command-line arguments after Arg (askFD < 0: no
// ask descriptor).
func Args(policyFD int, profile string, dns netip.AddrPort, httpAddr, socksAddr string, denialsFD, askFD int) []string {
	a := []string{Arg, "--policy-fd=" + strconv.Itoa(policyFD), "--profile=" + profile, "--dns=" + dns.String(),
		"--http=" + httpAddr, "--socks=" + socksAddr, "--denials-fd=" + strconv.Itoa(denialsFD)}
	if askFD >= 0 {
		a = append(a, "--ask-fd="+strconv.Itoa(askFD))
	}
	return a
}

// Main runs the egress proxy in the Runtime Supervisor's network
// namespace: it reads the sealed canonical policy, drops every capability
// on every thread and sets no_new_privs, binds both listeners, prints
// ReadyLine, and serves until its stdin (a pipe the parent holds) reaches
// EOF or SIGTERM arrives. It returns the exit status.
//
// Preconditions: started through the RS broker (its parent-death edge is
// armed), in RS's user and network namespaces.
func Main(args []string) int {
	fl := flag.NewFlagSet("egress", flag.ContinueOnError)
	policyFD := fl.Int("policy-fd", -1, "inherited sealed memfd holding the canonical network policy")
	profile := fl.String("profile", "", "Agent Profile name (for messages)")
	dns := fl.String("dns", "", "DNS server to resolve through, ADDR:PORT")
	httpAddr := fl.String("http", fmt.Sprintf("%s:%d", netpolicy.ProxyAddr, netpolicy.HTTPPort), "HTTP proxy listen address")
	socksAddr := fl.String("socks", fmt.Sprintf("%s:%d", netpolicy.ProxyAddr, netpolicy.SOCKSPort), "SOCKS5 proxy listen address")
	denialsFD := fl.Int("denials-fd", -1, "inherited descriptor of the Domain's network-denials.log (opened O_APPEND)")
	askFD := fl.Int("ask-fd", -1, "inherited stream socket for approvals at the terminal (needed when the policy asks)")
	level := fl.String("log-level", "info", "debug, info, warn or error")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(os.Stderr, "egress: --log-level=%q: %v\n", *level, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("role", "egress_proxy", "pid", os.Getpid())
	usage := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "egress: "+format+"\n", a...)
		return 2
	}
	if *policyFD < 0 || *denialsFD < 0 || *dns == "" || *profile == "" {
		return usage("--policy-fd, --denials-fd, --dns and --profile are required")
	}
	server, err := netip.ParseAddrPort(*dns)
	if err != nil {
		return usage("--dns=%q is not ADDR:PORT: %v", *dns, err)
	}
	raw, err := fdpass.ReadSealedMemfd(*policyFD, netpolicy.MaxCanonicalSize)
	if err != nil {
		log.Error("read the network policy", "err", err)
		return 1
	}
	pol, err := netpolicy.Decode(raw)
	if err != nil {
		log.Error("decode the network policy", "err", err)
		return 1
	}
	if pol.Mode != netpolicy.ModeAllowlist {
		log.Error("the network policy is not in allowlist mode: no egress proxy is needed", "mode", string(pol.Mode))
		return 1
	}
	if pol.Ask && *askFD < 0 {
		return usage("the policy asks for new hosts (network.ask) but no --ask-fd was given")
	}
	unix.CloseOnExec(*denialsFD)
	denials, err := NewDenialLog(os.NewFile(uintptr(*denialsFD), "network-denials.log"), time.Now)
	if err != nil {
		log.Error("denial log", "err", err)
		return 1
	}
	var ask func(context.Context, AskRequest) (Decision, error)
	if *askFD >= 0 {
		unix.CloseOnExec(*askFD)
		ask = NewFDAsker(os.NewFile(uintptr(*askFD), "ask"))
	}
	// The proxy serves what the sandbox sends: from here on no thread holds
	// any capability, and none can gain one (no_new_privs). Its ports are
	// above 1024, so binding needs none.
	if err := capability.DropAll(); err != nil {
		log.Error("drop capabilities", "err", err)
		return 1
	}
	hl, err := net.Listen("tcp4", *httpAddr)
	if err != nil {
		log.Error("listen for the HTTP proxy", "addr", *httpAddr, "err", err)
		return 1
	}
	sl, err := net.Listen("tcp4", *socksAddr)
	if err != nil {
		hl.Close()
		log.Error("listen for the SOCKS5 proxy", "addr", *socksAddr, "err", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		log.Info("stdin closed: stopping")
		cancel()
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT)
	go func() {
		sig := <-sigs
		log.Info("stopping on signal", "signal", sig.String())
		cancel()
	}()
	log.Info("egress proxy listening", "http", hl.Addr().String(), "socks", sl.Addr().String(), "profile", *profile,
		"hosts", len(pol.Hosts), "ask", pol.Ask, "dns", server.String(), "host_rules", strings.Join(hostStrings(pol.Hosts), " "))
	fmt.Fprintln(os.Stdout, ReadyLine)
	// Serving needs little of what starting did; the proxy lives as long
	// as its Domain.
	idlemem.SettleSoon(log)
	d := &net.Dialer{Timeout: ConnectTimeout}
	err = Serve(ctx, Config{
		Policy: pol, Profile: *profile, HTTP: hl, SOCKS: sl,
		Resolve: NewResolver(server), Dial: d.DialContext, Ask: ask,
		Denials: denials, Now: time.Now, Log: log,
	})
	if err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

func hostStrings(rs []netpolicy.HostRule) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}
