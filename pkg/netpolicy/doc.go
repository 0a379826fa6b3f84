// Package netpolicy derives a Domain generation's network policy from
// trusted host configuration (spec §3.6, FR-19, SR-6). It is pure: no
// syscalls. The Runtime Supervisor installs exactly this document, which
// reaches it as canonical bytes in a write-sealed memfd; the digest of those
// bytes is an input of the network readiness fingerprint.
//
// Policy shape (IPv4 only; IPv6 is disabled in the enforcement namespace and
// in the sandbox, so every enabled family is covered):
//
//   - default permit, except the deny prefixes: the built-in defaults
//     (RFC 1918 10/8, 172.16/12, 192.168/16 as the spec requires, plus
//     link-local 169.254/16 — cloud metadata services — and shared address
//     space 100.64/10) and the profile's own deny prefixes;
//   - allow prefixes, which take effect where more specific than a deny
//     (Linux longest-prefix routing);
//   - the Domain's DNS resolvers, each given a /32 allow route so that a
//     resolver inside a denied range stays reachable;
//   - an allow and a deny of the same prefix is a configuration error that
//     names both entries (never silently resolved).
//
// In allowlist mode (Mode, hosts.go) the policy also carries host rules:
// the sandbox then reaches only the egress proxy, which connects to a name
// only when a host rule matches it and every address it resolves to is
// permitted by the prefixes above (Permits).
//
// The sections below are the design of this package in detail; docs/ARCHITECTURE.md is the map.
//
// # Network policy
//
// HC derives the policy from trusted configuration only (`pkg/netpolicy`):
// built-in denies (10/8, 172.16/12, 192.168/16, 169.254/16, 100.64/10), the
// profile's allow/deny prefixes (an equal-prefix conflict is a configuration
// error naming both entries) and /32 allows for the DNS resolvers. Its
// canonical bytes go to RS in a write-sealed memfd (`--policy-fd`) with their
// digest in `StartSandbox`; RS verifies seals and digest, disables IPv6, and
// installs each deny prefix as a loopback-unicast route (`via 127.0.0.1 dev
// lo`, the only deny form gVisor honours) before runsc boots, reads the routes
// back and attests them in `SandboxReady`; HC refuses a digest mismatch. Once
// runsc has booted, RS drops `CAP_NET_ADMIN` from every set on every thread
// (`syscall.AllThreadsSyscall`, hence CGO_ENABLED=0).
//
// Connectivity helper (`pkg/slirp`, FR-16). HC (in the host network
// namespace) commits the `helper` participant's Intent and acquires
// slirp4netns through its broker as an exec chain in one process:
// `nsenter --user=/proc/<RS>/ns/user --preserve-credentials -- lazaret-gitroute
// __lazaret-slirp --resolv-conf=F -- slirp4netns --configure --mtu=65520
// --disable-host-loopback --enable-sandbox --enable-seccomp --cidr=10.0.2.0/24
// --exit-fd=3 --ready-fd=4 <RS pid> tap0`. Why: slirp4netns's DNS forwarder
// (10.0.2.3) forwards to the nameservers of the resolv.conf it sees, and
// `--enable-sandbox` binds `/etc` from its mount namespace; an unprivileged
// host process cannot have a private mount namespace, but inside RS's user
// namespace (whose root is the developer) the `__lazaret-slirp` link unshares
// one on its locked thread and binds the Domain's per-generation resolver list
// over `/etc/resolv.conf` before exec'ing slirp4netns, while the network
// namespace stays the host's (measured: the forwarder then answers from the
// chosen resolvers only). nsenter does the user-namespace join because a
// multithreaded Go process cannot. slirp4netns joins RS's netns by pid, so its
// sandbox and seccomp modes work. Staged identity is recorded before the
// barrier is released; it is Committed once RS is. Exit coupling: the
// wrapper's PDEATHSIG plus `--exit-fd` (HC holds the only write end), and a
// pidfd SIGKILL if it lingers at teardown; bootstrap recovery proves it gone
// through PidfsRecoveryMatch. RS installs the allow routes via the tap's
// gateway and refuses to start without the tap.
//
// Fail fast. The deny space minus every permitted destination (allows,
// resolver /32s, the helper's /24) is assigned to `lo` as addresses without
// prefix routes (`netpolicy.Policy.FailFast`): gVisor treats `lo` as bound to
// the whole subnet of each of its addresses, so a connection into denied space
// is refused inside the sandbox at once instead of
// vanishing into the loopback route; the deny routes are unchanged, and a
// permitted destination never lies in that space (unit-tested; the probe
// proves it at every start).
//
// Resolver files. Per generation HC writes `/etc/resolv.conf`
// (`nameserver 10.0.2.3`, the helper's forwarder), `/etc/hosts` and
// `/etc/hostname` in the runtime directory; the OCI spec binds them over the
// image's (`ocispec.HostFiles`), so no persistent layer can keep a stale copy.
//
// Host names. `network.allow_hosts` are resolved by HC at generation start
// through the Domain's resolvers into /32 allows, pinned for the generation
// (gVisor imports routes only at boot); an unresolved name is a warning.
//
// Readiness (FR-18, FR-20). The readiness fingerprint is SHA-256 over the
// length-framed Domain ID, generation, configuration fingerprint, Network
// Sidecar ID (minted per generation, in the generation record's component
// IDs), policy digest and RS netns identity. HC hands the guest init a probe
// spec bound to it (`pkg/netprobe`); before its ready line the init, in the
// sandbox's own network view, checks without sending anything or waiting for
// timeouts: a UDP connect into each deny prefix (at an address of it that no
// more specific entry covers, outside 0/8, loopback, multicast and reserved
// space, whose routing says nothing about the prefix) picks source 127.0.0.1
// (the loopback route) or the address itself, which must then refuse a TCP
// connect at once (fail fast); each allow prefix picks the tap address; the gateway is
// routed via the tap and answers a TCP connect at once (slirp4netns answers
// with ICMP network-unreachable when host loopback is disabled); the DNS
// forwarder answers a query for a random name under `.invalid` within 1.5 s.
// HC judges the echoed report against the spec; publication is refused unless
// deny and permit are proven. A DNS failure (an offline host) is a warning,
// recorded as `dns_observed=false`. The evidence is persisted in the
// `network` participant, whose Committed state the store accepts only with
// evidence naming this generation, fingerprint, policy digest, netns and the
// committed RS, after the helper is Committed with the same RS.
//
// Egress proxy (allowlist mode; `pkg/egress`, `pkg/netsetup/sandboxns.go`,
// `pkg/rs/egress.go`, `pkg/hc/network`). With `network.mode =
// "allowlist"` the policy document is v2 (`mode allowlist`, `host RULE`
// lines, `ask`; a deny-mode policy keeps its v1 bytes and digest). RS reads
// the mode from the sealed policy memfd before its hello and creates the
// sandbox's own network namespace on a dedicated locked thread that never
// leaves it (`netsetup.SandboxNamespace`); the hello carries its identity and
// the thread's tid, and HC verifies `/proc/<RS>/task/<tid>/ns/net` (RS is its
// unreaped child) against it, refuses it if it is RS's or the host's, and
// puts that path in the OCI spec instead of RS's. RS's own namespace keeps
// everything it has in the deny mode (tap, deny routes, fail-fast
// addresses): there RS runs the proxy, broker-acquired in slot
// `egress_proxy` (staged with HC and acknowledged like the Git-routing
// daemon, PDEATHSIG, stdin EOF ends it, SIGKILL through its pidfd at
// teardown; it cannot outlive RS, whose exit bootstrap recovery proves),
// with a fresh sealed memfd of the policy, the Domain's
// `network-denials.log` opened by RS (O_APPEND) and one end of an ask
// socket. Before runsc boots, RS builds a veth pair: `lzp0` 10.0.3.1/30 in
// its namespace (the proxy's HTTP port 3128 and SOCKS5 port 1080) and `lzs0`
// 10.0.3.2/30 in the sandbox's, with lo up and IPv6 off there and no other
// route; it reads the sandbox namespace's routes back (only the connected
// /30 may exist) and reports them with the proxy's identity in
// `SandboxReady`, which HC checks (and filters the proxy's connected route
// out of RS's routes before judging them against the IP policy). The proxy
// drops every capability, admits a CONNECT, absolute-URI HTTP or SOCKS5
// request only when the name matches a host rule, resolves it through the
// connectivity helper's forwarder (the Domain's resolvers) and connects only
// to an address `Policy.Permits` (loopback, link-local, 0/8, multicast and
// denied prefixes refused unless an allow covers them); its own connections
// leave through slirp4netns under RS's deny routes. Refusals are HTTP 403 /
// SOCKS 0x02 naming the key that would allow the host, and lines of the
// bounded, versioned denial log (`lazaret network log`, `status`). The
// readiness probe's allowlist variant checks, inside the sandbox, that both
// halves of the address space and every policy prefix are unreachable and
// that the proxy accepts a connect. HC adds the proxy variables to the
// guest environment (sessions with their label `s-<session>`), points
// `/etc/resolv.conf` at the proxy address (no DNS there: lookups fail at
// once) and sets `GIT_SSH_COMMAND` to ssh through the in-sandbox binary's
// SOCKS5 connect role (`__lazaret-connect`). Ask: the proxy sends
// `{id, session, host, port, via}` on its ask socket; RS relays it as
// `NetworkAsk`; HC finds the labelled session and, if it has a terminal,
// shows an `EscalationPrompt` with `network_host`/`network_port` on its
// prompt port (the escalation prompt's route and one-at-a-time rules); the
// CLI answers a signed `DeveloperDecision` with `network_scope` once/domain
// (or a denial), HC verifies it with the session's anchor key, audits a
// `network_decision` and answers `NetworkDecision`; the proxy remembers a
// domain approval for its lifetime. No terminal, no label, no answer in five
// minutes: denied.
package netpolicy
