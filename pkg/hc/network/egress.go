package network

import (
	"fmt"
	"net/netip"
	"strings"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/netsetup"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/slirp"
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

// SandboxNetNS verifies the hello's sandbox network namespace against the
// policy's mode and returns the path runsc joins: RS's own namespace in
// the deny mode, RS's holding thread's in the allowlist mode. RS is our
// unreaped child, so its pid (and the thread's tid under it) cannot be
// reused while we read them.
func (s *Service) SandboxNetNS(hello *lv1.SupervisorHello, rsPID int, rsPath string, rs *lv1.NamespaceIdentity) (string, error) {
	if !s.Allowlist() {
		if hello.SandboxNetNamespace != nil || hello.SandboxNetnsTid != 0 {
			return "", errdefs.New(errdefs.ErrRefused, "the runtime supervisor reports a sandbox network namespace, but the policy is not in the allowlist mode")
		}
		return rsPath, nil
	}
	if hello.SandboxNetNamespace == nil || hello.SandboxNetnsTid == 0 {
		return "", errdefs.New(errdefs.ErrRefused, "the allowlist network mode needs the sandbox's own network namespace, and the runtime supervisor reports none")
	}
	path := fmt.Sprintf("/proc/%d/task/%d/ns/net", rsPID, hello.SandboxNetnsTid)
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
	s.mu.Lock()
	s.egress.netns = got
	s.mu.Unlock()
	return path, nil
}

// EgressSpec is StartSandbox's egress proxy part (nil in the deny mode).
func (s *Service) EgressSpec() *lv1.EgressProxySpec {
	if !s.Allowlist() {
		return nil
	}
	return &lv1.EgressProxySpec{
		Dns:         netip.AddrPortFrom(s.Addr().DNS, 53).String(),
		DenialsPath: s.cfg.DenialsPath,
	}
}

// CommitStagedEgress acknowledges RS's staged egress proxy ownership. The
// proxy is RS's child with a parent-death signal, stopped by RS through its
// pidfd: it cannot outlive RS, whose own exit recovery proves. Only the
// allowlist mode has a proxy: in the deny mode the report is refused.
func (s *Service) CommitStagedEgress(st *lv1.StagedProcessOwnership) error {
	if !s.Allowlist() {
		return errdefs.New(errdefs.ErrRefused, "staged egress proxy ownership, but the network policy is not in the allowlist mode")
	}
	boot, err := pidfs.CurrentBootID()
	if err != nil {
		return err
	}
	if st.Identity == nil || string(st.Identity.BootId) != string(boot[:]) {
		return errdefs.New(errdefs.ErrRefused, "staged egress proxy identity is not of this boot")
	}
	s.mu.Lock()
	dup := s.egress.staged != nil
	if !dup {
		s.egress.staged = st
	}
	s.mu.Unlock()
	if dup {
		return errdefs.New(errdefs.ErrRefused, "duplicate staged egress proxy ownership")
	}
	return s.cfg.Ack(st)
}

// ReadyEgress checks SandboxReady's egress evidence: the staged proxy, and
// the sandbox namespace's routes (nothing but the proxy's connected
// prefix). In the deny mode there must be none.
func (s *Service) ReadyEgress(r *lv1.SandboxReady) error {
	s.mu.Lock()
	staged := s.egress.staged
	s.mu.Unlock()
	if !s.Allowlist() {
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
	s.mu.Lock()
	s.egress.ready = r.EgressProxy
	s.mu.Unlock()
	return nil
}

// PolicyRoutes is RS's observed routes without the proxy's own connected
// route (allowlist mode), which the IP policy does not describe.
func (s *Service) PolicyRoutes(observed []string) []string {
	if !s.Allowlist() {
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

// ProxyEnv is the environment that points a sandbox process at the egress
// proxy (allowlist mode). label attributes its requests to a session (the
// proxy's user name); it is attribution, not authentication.
func ProxyEnv(label string) map[string]string {
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
	env["GIT_SSH_COMMAND"] = fmt.Sprintf("ssh -o 'ProxyCommand=%s %s %%h %%p'", ocispec.EscalatePath, ocispec.ConnectArg)
	return env
}

// SessionLabel is a session's proxy user name.
func SessionLabel(id string) string { return "s-" + id }

func bytesEqualIdentity(a, b *lv1.PidfsProcessIdentityV1) bool {
	return a != nil && b != nil && string(a.BootId) == string(b.BootId) && a.PidfsStDev == b.PidfsStDev && a.PidfsStIno == b.PidfsStIno && a.HostPid == b.HostPid
}

// Addr is the helper's addressing (zero before Prepare).
func (s *Service) Addr() slirp.Network {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// VerifyReady checks SandboxReady's network evidence against what this
// role derived: the attested policy digest, and the routes RS observed,
// which must enforce the policy whatever RS echoes.
func (s *Service) VerifyReady(r *lv1.SandboxReady) error {
	pol := s.Policy()
	if d := pol.Digest(); string(r.PolicyDigest) != string(d[:]) {
		return errdefs.New(errdefs.ErrRefused, "the runtime supervisor attests network policy %x, not the derived %x", r.PolicyDigest, d[:])
	}
	if err := pol.VerifyRoutes(s.PolicyRoutes(r.ObservedRoutes), slirp.Tap, s.Gateway()); err != nil {
		return errdefs.Mark(fmt.Errorf("the runtime supervisor's observed routes do not enforce the derived network policy: %w", err), errdefs.ErrRefused)
	}
	return nil
}
