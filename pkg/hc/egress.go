package hc

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netsetup"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
)

// The allowlist network mode (package netpolicy's doc, "Egress proxy"): the
// sandbox runs in its own network namespace, held by a thread of RS, whose
// only route leads to the egress proxy, a child of RS in RS's namespace;
// the proxy admits only the profile's host names and connects through the
// connectivity helper under the IP policy.

// egressState is the generation's egress proxy as HC knows it.
type egressState struct {
	staged *lv1.StagedProcessOwnership // RS's staged proxy ownership, acknowledged
	ready  *lv1.PidfsProcessIdentityV1 // the proxy SandboxReady reported
	netns  *lv1.NamespaceIdentity      // the sandbox's own network namespace
}

func (c *coordinator) allowlist() bool { return c.policy.Mode == netpolicy.ModeAllowlist }

// sandboxNetNS verifies the hello's sandbox network namespace against the
// policy's mode and returns the path runsc joins: RS's own namespace in
// the deny mode, RS's holding thread's in the allowlist mode. RS is our
// unreaped child, so its pid (and the thread's tid under it) cannot be
// reused while we read them.
func (c *coordinator) sandboxNetNS(hello *lv1.SupervisorHello, rsPath string, rs *lv1.NamespaceIdentity) (string, error) {
	if !c.allowlist() {
		if hello.SandboxNetNamespace != nil || hello.SandboxNetnsTid != 0 {
			return "", errdefs.New(errdefs.ErrRefused, "the runtime supervisor reports a sandbox network namespace, but the policy is not in the allowlist mode")
		}
		return rsPath, nil
	}
	if hello.SandboxNetNamespace == nil || hello.SandboxNetnsTid == 0 {
		return "", errdefs.New(errdefs.ErrRefused, "the allowlist network mode needs the sandbox's own network namespace, and the runtime supervisor reports none")
	}
	path := fmt.Sprintf("/proc/%d/task/%d/ns/net", c.rsChild.Handle().PID(), hello.SandboxNetnsTid)
	dev, ino, err := pidfs.NamespaceOfPath(path)
	if err != nil {
		return "", errdefs.Mark(fmt.Errorf("the sandbox network namespace %s: %w", path, err), errdefs.ErrRefused)
	}
	got := &lv1.NamespaceIdentity{Dev: dev, Ino: ino}
	if !proto.Equal(got, hello.SandboxNetNamespace) {
		return "", errdefs.New(errdefs.ErrRefused, "the sandbox network namespace at %s is %d:%d, not the reported %v", path, dev, ino, hello.SandboxNetNamespace)
	}
	if proto.Equal(got, rs) {
		return "", errdefs.New(errdefs.ErrRefused, "the sandbox network namespace is the runtime supervisor's own")
	}
	if hdev, hino, err := pidfs.NamespaceOfPath("/proc/self/ns/net"); err == nil && hdev == dev && hino == ino {
		return "", errdefs.New(errdefs.ErrRefused, "the sandbox network namespace is the host's")
	}
	c.mu.Lock()
	c.egress.netns = got
	c.mu.Unlock()
	return path, nil
}

// egressSpec is StartSandbox's egress proxy part (nil in the deny mode).
func (c *coordinator) egressSpec() *lv1.EgressProxySpec {
	if !c.allowlist() {
		return nil
	}
	return &lv1.EgressProxySpec{
		Dns:         netip.AddrPortFrom(c.net.addr.DNS, 53).String(),
		DenialsPath: c.paths.NetworkDenials(),
	}
}

// commitStagedEgress acknowledges RS's staged egress proxy ownership. The
// proxy is RS's child with a parent-death signal, stopped by RS through its
// pidfd: it cannot outlive RS, whose own exit recovery proves.
func (c *coordinator) commitStagedEgress(s *lv1.StagedProcessOwnership) error {
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return err
	}
	if s.Identity == nil || string(s.Identity.BootId) != string(boot[:]) {
		return errdefs.New(errdefs.ErrRefused, "staged egress proxy identity is not of this boot")
	}
	c.mu.Lock()
	dup := c.egress.staged != nil
	if !dup {
		c.egress.staged = s
	}
	c.mu.Unlock()
	if dup {
		return errdefs.New(errdefs.ErrRefused, "duplicate staged egress proxy ownership")
	}
	return c.ackStaged(s)
}

// readyEgress checks SandboxReady's egress evidence: the staged proxy, and
// the sandbox namespace's routes (nothing but the proxy's connected
// prefix). In the deny mode there must be none.
func (c *coordinator) readyEgress(r *lv1.SandboxReady) error {
	c.mu.Lock()
	staged := c.egress.staged
	c.mu.Unlock()
	if !c.allowlist() {
		if r.EgressProxy != nil || staged != nil || len(r.ObservedSandboxRoutes) > 0 {
			return errdefs.New(errdefs.ErrRefused, "the runtime supervisor reports an egress proxy the policy did not ask for")
		}
		return nil
	}
	if r.EgressProxy == nil || staged == nil || !bytesEqualIdentity(r.EgressProxy, staged.Identity) {
		return errdefs.New(errdefs.ErrRefused, "SandboxReady names an egress proxy that was not staged")
	}
	connected := netpolicy.ProxyPrefix
	if len(r.ObservedSandboxRoutes) == 0 {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor observed no route in the sandbox network namespace")
	}
	for _, line := range r.ObservedSandboxRoutes {
		rt, err := netpolicy.ParseObservedRoute(line)
		if err != nil {
			return errdefs.Mark(err, errdefs.ErrRefused)
		}
		if rt.Dst != connected || rt.Dev != netsetup.SandboxLink || rt.Gateway.IsValid() {
			return errdefs.New(errdefs.ErrRefused, "the sandbox network namespace has route %q; the allowlist mode allows only %s dev %s", line, connected, netsetup.SandboxLink)
		}
	}
	c.mu.Lock()
	c.egress.ready = r.EgressProxy
	c.mu.Unlock()
	return nil
}

// policyRoutes is RS's observed routes without the proxy's own connected
// route (allowlist mode), which the IP policy does not describe.
func (c *coordinator) policyRoutes(observed []string) []string {
	if !c.allowlist() {
		return observed
	}
	connected := netpolicy.ProxyPrefix
	var out []string
	for _, line := range observed {
		if rt, err := netpolicy.ParseObservedRoute(line); err == nil && rt.Dev == netsetup.ProxyLink && rt.Dst == connected && !rt.Gateway.IsValid() {
			continue
		}
		out = append(out, line)
	}
	return out
}

// proxyEnv is the environment that points a sandbox process at the egress
// proxy (allowlist mode). label attributes its requests to a session (the
// proxy's user name); it is attribution, not authentication.
func proxyEnv(label string) map[string]string {
	user := ""
	if label != "" {
		// An explicit empty password: git (libcurl) otherwise asks for one.
		user = label + ":@"
	}
	httpProxy := fmt.Sprintf("http://%s%s", user, netip.AddrPortFrom(netpolicy.ProxyAddr, netpolicy.HTTPPort))
	socks := fmt.Sprintf("socks5h://%s%s", user, netip.AddrPortFrom(netpolicy.ProxyAddr, netpolicy.SOCKSPort))
	env := map[string]string{}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY"} {
		env[k], env[strings.ToLower(k)] = httpProxy, httpProxy
	}
	env["ALL_PROXY"], env["all_proxy"] = socks, socks
	env["NO_PROXY"], env["no_proxy"] = "localhost,127.0.0.1,::1", "localhost,127.0.0.1,::1"
	// Node 22's fetch and http honour the variables only when asked to.
	env["NODE_USE_ENV_PROXY"] = "1"
	// git over SSH: ssh reaches the host through the proxy's SOCKS5 port.
	env["GIT_SSH_COMMAND"] = fmt.Sprintf("ssh -o 'ProxyCommand=%s %s %%h %%p'", ocispec.InitPath, ocispec.ConnectArg)
	return env
}

// sessionLabel is a session's proxy user name.
func sessionLabel(id string) string { return "s-" + id }

// decideNetworkAsk answers the proxy's question about a host outside the
// allowlist: only an interactive session's developer may allow it.
func (c *coordinator) decideNetworkAsk(a *lv1.NetworkAsk) {
	decision := c.askDeveloper(a)
	if err := c.rsChan.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_NetworkDecision{NetworkDecision: &lv1.NetworkDecision{Id: a.Id, Decision: decision}}}); err != nil {
		c.log.Warn("network decision not delivered", "host", a.Host, "err", err)
	}
}

// networkAskTimeout bounds a network ask (the proxy gives up after the
// same time).
const networkAskTimeout = 5 * time.Minute

// askDeveloper puts a network ask to the developer at the asking session's
// terminal, with the escalation prompt's routing: a session without a
// terminal (or an unknown label) is denied without asking. It returns
// "once", "domain" or "deny", audited either way.
func (c *coordinator) askDeveloper(a *lv1.NetworkAsk) string {
	target := fmt.Sprintf("%s:%d", a.Host, a.Port)
	dec := audit.Entry{Event: audit.EventNetworkDecision, Generation: c.generation, Profile: c.profile.Name, Argv: []string{target}, Reason: "via " + a.Via}
	finish := func(decision, by, reason string) string {
		dec.Decision, dec.DecidedBy = "deny", by
		if decision != "deny" {
			dec.Decision, dec.Reason = "approve", "scope "+decision
		}
		if reason != "" {
			dec.Reason = reason
		}
		c.esc.Audit(dec)
		c.log.Info("network ask decided", "host", target, "session_id", dec.SessionID, "decision", decision, "decided_by", by)
		return decision
	}
	id, ok := strings.CutPrefix(a.Session, "s-")
	c.mu.Lock()
	s := c.sessions[id]
	c.mu.Unlock()
	if !ok || s == nil {
		return finish("deny", "no-session", "the request names no session of this Domain")
	}
	dec.SessionID, dec.ClientID = s.id, s.claims.ClientID
	if !s.tty || c.esc == nil {
		return finish("deny", "no-terminal", "")
	}
	reqID := fmt.Sprintf("net-%d-%d", c.generation, a.Id)
	prompt := &lv1.EscalationPrompt{RequestId: reqID, Profile: c.profile.Name, SessionId: s.id, Generation: c.generation,
		NetworkHost: a.Host, NetworkPort: a.Port, TimeoutSeconds: uint32(networkAskTimeout / time.Second)}
	d, by, reason := c.esc.Ask(s.id, s.claims.AnchorPublicKey, prompt, networkAskTimeout, 5*time.Second)
	switch {
	case d == nil:
		return finish("deny", by, reason)
	case d.Decision == lv1.DecisionKind_DECISION_KIND_APPROVE && (d.NetworkScope == "once" || d.NetworkScope == "domain"):
		return finish(d.NetworkScope, "developer", "")
	}
	return finish("deny", "developer", "")
}
