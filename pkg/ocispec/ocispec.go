// Package ocispec builds the runsc OCI runtime specification of an Agent
// Sandbox and the process specifications of its sessions. It is pure: it
// makes no syscalls, so every security property of the spec is unit-tested.
//
// The shape follows SR-1, SR-3, SR-5 and SR-12 (spec §4.1) and what runsc
// was measured to accept rootless on the qualified kernels:
//
//   - private pid, ipc, uts and mount namespaces, a user namespace mapping
//     the guest ids 0..GuestIDs-1 onto the Runtime Supervisor's ids in two
//     extents (IDMappings), and the network namespace joined by the path of
//     the Runtime Supervisor's namespace that the Host Coordinator
//     verified; no other namespace path;
//   - noNewPrivileges and a capability set without CAP_NET_ADMIN/CAP_NET_RAW;
//   - the root is the prepared lower (read-only beneath, an ephemeral gVisor
//     overlay above: runsc --overlay2=root:memory); the only host paths are
//     the workspace at /workspace and Lazaret's fixed control mount at
//     ControlDir, read-only.
//
// The number of mounts is not what a cold start pays for: with runsc's
// --debug timeline, a typical spec (22 mounts, 16 of them binds) cost the
// gofer 1.6 ms to bind and the sentry about 6 ms to mount, of a boot that
// otherwise matched a one-mount bundle's (about 185 ms to "kernel started"
// on the 2-core development machine, under load).
package ocispec

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ControlDir is the fixed control directory inside the sandbox. Every
// Lazaret-owned host mount lives beneath it.
const ControlDir = "/.lazaret"

// WorkspaceDir is where the Agent Workspace is mounted.
const WorkspaceDir = "/workspace"

// InitPath is the guest init and session launcher binary (lazaret-init).
const InitPath = ControlDir + "/bin/lazaret-init"

// EscalatePath is the in-sandbox Escalation Client binary, which also hosts
// the allowlist network mode's ssh ProxyCommand (ConnectArg).
const EscalatePath = ControlDir + "/bin/lazaret-escalate"

// Escalation Mailbox mount points (spec §3.7): the request directory is
// writable by the sandbox, the result directory read-only. Their host
// sources are host-private, Domain- and generation-scoped directories of the
// Host Coordinator.
const (
	MailboxDir         = ControlDir + "/mailbox"
	MailboxRequestsDir = MailboxDir + "/requests"
	MailboxResultsDir  = MailboxDir + "/results"
	// CredentialsDir is the fixed credential path inside the sandbox.
	CredentialsDir = ControlDir + "/credentials"
)

// GuestIDs is the number of guest user and group ids: 0..65535, every id a
// Debian image or a package's system user uses, nobody (65534) included.
const GuestIDs = 65536

// IDMappings is the sandbox's user namespace map, for uids and gids alike,
// relative to the Runtime Supervisor's namespace, whose own map is
//
//	0          -> the developer (one id)
//	1..65536   -> the developer's subordinate ids
//
// A guest id g is RS id g, so guest root is the developer (workspace files
// stay theirs) and every other guest id is a subordinate id. The map has
// two extents because the kernel translates each extent of a child map
// into exactly one extent of the parent's (map_id_range_down in
// kernel/user_namespace.c): a single extent 0..65535 spans RS's two and the
// write of the gofer's uid_map fails with EPERM, which runsc reports as
// "gofer: fork/exec /proc/self/exe: operation not permitted".
func IDMappings() []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: 0, Size: 1},
		{ContainerID: 1, HostID: 1, Size: GuestIDs - 1},
	}
}

// InitArg selects lazaret-init's guest init role.
const InitArg = "__lazaret-init"

// ReadyLine is what the guest init prints on its stdout (a pipe to the
// Runtime Supervisor) once it runs.
const ReadyLine = "lazaret-init-ready"

// InitStartedLine is what the guest init prints on its stdout first, as
// soon as it runs (the timing trace's boundary between runsc's boot and
// the init's own start-up work).
const InitStartedLine = "lazaret-init-started"

// InitErrorPrefix starts the line the guest init prints on its stdout when
// it cannot start the sandbox (the rest is the error for the developer).
const InitErrorPrefix = "lazaret-init-error: "

// The first session: a generation's first non-interactive Client
// Session is started by the guest init once the Domain is published,
// instead of by a second `runsc exec` client (package sandboxinit). The
// Host Coordinator holds one end of a SOCK_SEQPACKET socket pair whose
// other end the init has as descriptor FirstSessionFD (the Runtime
// Supervisor passes it to the attached runsc). Each packet is one JSON
// message: FirstSessionRequest from the coordinator (the start carries the
// session's stdin, stdout and stderr as SCM_RIGHTS, in that order, which
// the command gets as they are, as `runsc exec` gives it its client's),
// FirstSessionReport from the init. The start may come held, ahead of
// the publication (FirstSession.Held): the init then resolves the command
// while the coordinator publishes, and starts it on the Go request.
const FirstSessionFD = 3

// FirstSessionVersion is the version of the first session's messages; a
// message of another version is refused.
const FirstSessionVersion = 2

// FirstSessionMaxMessage bounds one first-session message (the init
// keeps a buffer of it while it waits for the start): a start with a larger
// environment attaches with runsc exec instead.
const FirstSessionMaxMessage = 64 << 10

// FirstSessionRequest is the coordinator's message to the init: Start,
// Go (start the held start), or Signal (to the command's process, or with
// Group its process group).
type FirstSessionRequest struct {
	Version int           `json:"version"`
	Start   *FirstSession `json:"start,omitempty"`
	Go      bool          `json:"go,omitempty"`
	Signal  int           `json:"signal,omitempty"`
	Group   bool          `json:"group,omitempty"`
}

// FirstSession is the first session's command, as the init starts it.
// Its capabilities and resource limits are the init's own: the sandbox's
// process specification gives the init what a session's process
// specification gives a session (process), and a non-root UID drops the
// capabilities at the exec.
//
// A Held start is resolved (the command looked up) and kept: nothing of
// it runs until the Go request; the socket's end drops it, closing its
// streams. The coordinator sends it once the sandbox is ready, so that the
// init resolves the command while the Domain is published.
type FirstSession struct {
	Held bool     `json:"held,omitempty"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	UID  uint32   `json:"uid"`
	GID  uint32   `json:"gid"`
}

// FirstSessionReport is the init's message to the coordinator: the
// command started (Pid, in the sandbox), or exited (Exited: its exit Code
// or its killing Signal, also when it could not start; the init then
// wrote why on the command's stderr).
type FirstSessionReport struct {
	Version int  `json:"version"`
	Pid     int  `json:"pid,omitempty"`
	Exited  bool `json:"exited,omitempty"`
	Code    int  `json:"code,omitempty"`
	Signal  int  `json:"signal,omitempty"`
}

// ExecArg selects lazaret-init's session launcher role.
const ExecArg = "__lazaret-exec"

// ConnectArg selects lazaret-escalate's SOCKS5 connect role (the
// allowlist network mode's ssh ProxyCommand: ConnectArg HOST PORT).
const ConnectArg = "__lazaret-connect"

// LaunchGOMAXPROCS is in the environment of lazaret-init, as the init and
// as the session launcher. A Go program in gVisor starts much faster with
// one P: with two, the runtime's start wakes a second thread for its
// goroutines, and every guest thread is a dear host thread and sentry task
// (bare `runsc run` of an empty Go program: 9 ms over /bin/true with
// GOMAXPROCS=1, 23 ms without).
const LaunchGOMAXPROCS = "GOMAXPROCS=1"

// LaunchEnvArg tells the session launcher that the GOMAXPROCS of its
// environment is its own (LaunchGOMAXPROCS, added by Launch), which it
// removes before it execs the command.
const LaunchEnvArg = "--unset-gomaxprocs"

// InitEnv is the guest init's environment: env with LaunchGOMAXPROCS last
// (runsc keeps the last of a variable's entries).
func InitEnv(env []string) []string {
	return append(append([]string(nil), env...), LaunchGOMAXPROCS)
}

// Launch wraps a session process in the in-sandbox launcher, which execs
// its command in place (same pid) with exactly p.Env, or reports 127/126
// like a shell. Unless p.Env sets GOMAXPROCS itself (then the launcher
// starts with that value), the launcher gets LaunchGOMAXPROCS and
// LaunchEnvArg; runsc reorders the environment, so the argument, not a
// position, tells the launcher the entry is its own.
func Launch(p Process) Process { return launch(p, false) }

func launch(p Process, identified bool) Process {
	args := []string{InitPath, ExecArg}
	if !hasEnv(p.Env, "GOMAXPROCS") {
		p.Env = append(append([]string(nil), p.Env...), LaunchGOMAXPROCS)
		args = append(args, LaunchEnvArg)
	}
	if identified {
		args = append(args, IdentityArg)
	}
	p.Args = append(append(args, "--"), p.Args...)
	return p
}

// IdentityFD is the guest descriptor on which the session launcher of an
// interactive session reports its identity (IdentityArg): the Host
// Coordinator passes the write end of a pipe as this descriptor (runsc exec
// --pass-fd) and reads the launcher's /proc/self/stat line from the other.
const IdentityFD = 3

// IdentityArg tells the session launcher to report its /proc/self/stat
// line on IdentityFD, and close it, just before it execs its command in
// place: the command's pid, process group and start time are the
// launcher's.
const IdentityArg = "--report-identity"

// LaunchIdentified is Launch for a session whose launcher reports its
// identity on IdentityFD (IdentityArg) before it execs the command.
func LaunchIdentified(p Process) Process { return launch(p, true) }

// hasEnv reports whether env has an entry for name.
func hasEnv(env []string, name string) bool {
	for _, e := range env {
		if k, _, ok := strings.Cut(e, "="); ok && k == name {
			return true
		}
	}
	return false
}

// Capabilities granted to guest processes: the usual container default set
// without CAP_NET_RAW, and never CAP_NET_ADMIN (SR-5).
var Capabilities = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE",
	"CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYS_CHROOT",
}

// forbiddenCaps must never appear in a guest process.
var forbiddenCaps = map[string]bool{"CAP_NET_ADMIN": true, "CAP_NET_RAW": true, "CAP_SYS_ADMIN": true}

// Sandbox describes one Agent Sandbox.
type Sandbox struct {
	Hostname string
	// Workspace is the canonical host path of the Agent Workspace.
	Workspace string
	// ControlSource is the host directory mounted read-only at ControlDir.
	ControlSource string
	// NetNSPath is the verified network namespace path: the Runtime
	// Supervisor's (/proc/<pid>/ns/net), or in the allowlist network mode
	// the sandbox's own, held by an RS thread (/proc/<pid>/task/<tid>/ns/net).
	NetNSPath string
	// Env is the base environment of every guest process.
	Env []string
	// Volumes are developer-configured host paths (SR-3 allows them).
	Volumes []Volume
	// Anchors are the State Anchor overlays (spec §3.5), mounted by the
	// Runtime Supervisor at AnchorSourceDir(bundle)/<name> in its own mount
	// namespace and bound read-write at their persistent guest paths. They
	// come before every other bind so that binds beneath them (EtcFiles in
	// /etc, volumes) are mounted on top.
	Anchors []Anchor
	// ProfilePaths are the profile's shared directories (package
	// profilestate), bound read-write at their guest paths right after the
	// State Anchors (a profile path usually lies inside /home's).
	ProfilePaths []ProfilePath
	// WorkspaceSource is the host path mounted at WorkspaceDir when it is
	// not Workspace itself: the Git-routing daemon's mount (SR-13).
	WorkspaceSource string
	// RouterSource is the Git-routing daemon's mount of the workspace; Git
	// Sentry binds may take their source from it.
	RouterSource string
	// DomainRoot is the Domain's root directory on the host; the sources
	// of IgnoredBinds lie in its Ignored Workspace State.
	DomainRoot string
	// IgnoredBinds are Git-ignored directories served as direct binds of
	// their Ignored Workspace State copies (SR-13, package ignoredbind)
	// on top of the routed workspace, whose daemon provides their mount
	// points: nothing is created on the host.
	IgnoredBinds []IgnoredBind
	// Protected are the Git Sentry mounts below WorkspaceDir (SR-4),
	// parents first.
	Protected []Protected
	// GitCommonDir is the common Git directory of a linked worktree the
	// developer opted in to mount (SR-3: like a configured volume, at the
	// same absolute path); CommonProtected are its Git Sentry mounts (Rel
	// relative to GitCommonDir, "." the directory itself, parents first).
	GitCommonDir    string
	CommonProtected []Protected
	// ControlFiles are read-only single-file binds beneath ControlDir
	// (the sandbox key's, which must outlive its source); their mount
	// points must exist in the control source. Every bind costs the
	// sandbox's boot a gofer connection: files that need no mount of
	// their own belong in the control source itself.
	ControlFiles []ControlFile
	// EtcFiles maps each of HostFiles to the generation's host file bound
	// over it (read-write: edits last only for the generation).
	EtcFiles map[string]string
	// MailboxRequests and MailboxResults are the host sources of the
	// Escalation Mailbox (MailboxRequestsDir read-write, MailboxResultsDir
	// read-only); both empty when the sandbox has no mailbox.
	MailboxRequests, MailboxResults string
}

// HostFiles are the generation's name-service files, bound over the
// image's so that no persistent layer can keep a stale copy (spec §3.6).
var HostFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname"}

// HostSideBinds are the destinations of the spec's single-file binds that
// the Runtime Supervisor may make itself, in its mount namespace, over the
// same file beneath the source of the enclosing rbind (the control source,
// the /etc State Anchor), dropping them from the spec it hands to runsc:
// the ControlFiles and the HostFiles. runsc serves every spec mount through
// a gofer mount of its own (about 2 ms of the sandbox's boot each, measured
// with bare runsc); a file bound beneath an enclosing rbind is served
// through that one's, which carries its submounts. The guest sees the same
// file at the same path with the same access: read-only beneath the
// read-only control mount, read-write beneath the read-write anchor. One
// difference remains for the read-write ones: the sentry does not know the
// host bind, so replacing /etc/hosts (sed -i, rm, ln -sf) succeeds and
// detaches the bind instead of failing with EBUSY; what the sandbox put
// there stays in the /etc anchor, and the next generation binds its own
// file there again (RS replaces a symlink, moves a directory aside), so no
// stale copy shows at generation start.
//
// A name-service file qualifies only beneath a State Anchor (a profile
// without the /etc anchor has them mounted on the root's overlay, which
// only runsc can do).
func HostSideBinds(s Sandbox) []string {
	var out []string
	for _, f := range s.ControlFiles {
		out = append(out, f.Target)
	}
	for _, t := range HostFiles {
		if _, ok := s.EtcFiles[t]; !ok {
			continue
		}
		for _, a := range s.Anchors {
			if strings.HasPrefix(t, a.Target+"/") {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// ControlFile is a read-only bind of one host file under ControlDir.
type ControlFile struct {
	Source, Target string
}

// IgnoredBind is one Git-ignored directory bound from the Domain's
// Ignored Workspace State: Source is <DomainRoot>/ignored-state/<Rel>,
// bound at /workspace/<Rel>.
type IgnoredBind struct {
	Rel, Source string
}

// IgnoredStateDir is the Ignored Workspace State directory beneath the
// Domain root (package ignoredstate).
const IgnoredStateDir = "ignored-state"

// IgnoredBindSource is the state directory of the workspace-relative
// ignored path rel.
func IgnoredBindSource(domainRoot, rel string) string {
	return path.Join(domainRoot, IgnoredStateDir, rel)
}

// validIgnoredBind: a clean relative path below the workspace, outside
// every Git directory, whose source is its own state directory under the
// Domain root.
func (s Sandbox) validIgnoredBind(b IgnoredBind) error {
	if b.Rel == "" || path.IsAbs(b.Rel) || path.Clean(b.Rel) != b.Rel || b.Rel == "." || b.Rel == ".." || strings.HasPrefix(b.Rel, "../") {
		return fmt.Errorf("ocispec: ignored bind %q must be a clean path relative to the workspace", b.Rel)
	}
	for _, c := range strings.Split(b.Rel, "/") {
		if c == ".git" || c == ".." {
			return fmt.Errorf("ocispec: ignored bind %q may not be or lie in a Git directory", b.Rel)
		}
	}
	if s.DomainRoot == "" || !path.IsAbs(s.DomainRoot) || path.Clean(s.DomainRoot) != s.DomainRoot || s.DomainRoot == "/" {
		return fmt.Errorf("ocispec: ignored bind %q needs a clean absolute Domain root, not %q", b.Rel, s.DomainRoot)
	}
	if b.Source != IgnoredBindSource(s.DomainRoot, b.Rel) {
		return fmt.Errorf("ocispec: ignored bind %q must bind its state directory %s, not %q", b.Rel, IgnoredBindSource(s.DomainRoot, b.Rel), b.Source)
	}
	if s.RouterSource == "" || s.workspaceSource() != s.RouterSource {
		return fmt.Errorf("ocispec: ignored bind %q needs the routed workspace (its daemon provides the mount point)", b.Rel)
	}
	for _, p := range s.Protected {
		if p.Rel == b.Rel || strings.HasPrefix(b.Rel, p.Rel+"/") || strings.HasPrefix(p.Rel, b.Rel+"/") {
			return fmt.Errorf("ocispec: ignored bind %q overlaps the Git Sentry mount %q", b.Rel, p.Rel)
		}
	}
	return nil
}

func (s Sandbox) isIgnoredBind(m specs.Mount) bool {
	for _, b := range s.IgnoredBinds {
		if m.Destination == path.Join(WorkspaceDir, b.Rel) && m.Source == b.Source && s.validIgnoredBind(b) == nil && !hasOpt(m.Options, "rbind") && hasOpt(m.Options, "nosuid") && hasOpt(m.Options, "nodev") {
			return true
		}
	}
	return false
}

// Anchor is one State Anchor bind: Source is AnchorSourceDir(bundle)/<name>.
type Anchor struct {
	Source, Target string
}

// ProfilePath is one profile path bind: Source is the profile's stored
// directory <Storage Root>/profiles/<profile>/paths/<escaped>/data.
type ProfilePath struct {
	Source, Target string
}

// AnchorSourceDir is where RS mounts the State Anchor overlays of a bundle.
func AnchorSourceDir(bundleDir string) string { return path.Join(bundleDir, "anchors") }

// Protected is one Git Sentry mount: a bind of the same host path of the
// workspace (read-write or read-only), or transient tmpfs.
type Protected struct {
	// Rel is the workspace-relative, slash-separated path.
	Rel string
	// Source is the host path Workspace/Rel (empty for Transient).
	Source    string
	ReadOnly  bool
	Transient bool
}

// sameWorkspacePath reports whether src is the workspace path rel, on the
// host or through the Git-routing daemon.
func (s Sandbox) sameWorkspacePath(rel, src string) bool {
	return src == path.Join(s.Workspace, rel) || s.RouterSource != "" && src == path.Join(s.RouterSource, rel)
}

func (s Sandbox) workspaceSource() string {
	if s.WorkspaceSource != "" {
		return s.WorkspaceSource
	}
	return s.Workspace
}

// Volume is one developer-configured bind mount.
type Volume struct {
	Source, Target string
	ReadOnly       bool
}

// Process describes one guest process.
type Process struct {
	Args []string
	Env  []string
	// Cwd is an absolute guest path.
	Cwd      string
	Terminal bool
	// UID and GID are the guest user (0: root). A non-root process gets
	// no capability beyond the bounding set: it runs like a login of that
	// user, so files it creates are its own.
	UID, GID uint32
	// Rlimits are the process's resource limits (zero: DefaultRlimits).
	Rlimits Rlimits
}

// Rlimits are the limits every guest process starts with, soft equal to
// hard. The sentry enforces both itself: RLIMIT_NPROC per guest user on
// every fork and clone (guest processes hold neither CAP_SYS_ADMIN nor
// CAP_SYS_RESOURCE, the capabilities that exempt a task and that raising a
// hard limit needs), RLIMIT_NOFILE per process.
type Rlimits struct {
	NProc, NoFile uint64
}

// DefaultRlimits are the limits of a Process that sets none.
var DefaultRlimits = Rlimits{NProc: 4096, NoFile: 65536}

func (r Rlimits) posix() []specs.POSIXRlimit {
	if r.NProc == 0 {
		r.NProc = DefaultRlimits.NProc
	}
	if r.NoFile == 0 {
		r.NoFile = DefaultRlimits.NoFile
	}
	return []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Hard: r.NoFile, Soft: r.NoFile},
		{Type: "RLIMIT_NPROC", Hard: r.NProc, Soft: r.NProc},
	}
}

func (s Sandbox) validate() error {
	paths := map[string]string{"workspace": s.Workspace, "workspace source": s.workspaceSource(), "control source": s.ControlSource, "netns path": s.NetNSPath}
	for i, p := range s.Protected {
		if p.Rel == "" || path.IsAbs(p.Rel) || path.Clean(p.Rel) != p.Rel || strings.HasPrefix(p.Rel, "../") || p.Rel == ".." {
			return fmt.Errorf("ocispec: protected path %d %q must be clean and relative to the workspace", i, p.Rel)
		}
		if !p.Transient && !s.sameWorkspacePath(p.Rel, p.Source) {
			return fmt.Errorf("ocispec: protected path %q must bind the same workspace path, not %q", p.Rel, p.Source)
		}
	}
	for i, v := range s.Volumes {
		paths[fmt.Sprintf("volume %d source", i)] = v.Source
		paths[fmt.Sprintf("volume %d target", i)] = v.Target
		if isHostFile(v.Target) || v.Target == WorkspaceDir || v.Target == "/" || v.Target == ControlDir || strings.HasPrefix(v.Target, ControlDir+"/") || strings.HasPrefix(v.Target, WorkspaceDir+"/") {
			return fmt.Errorf("ocispec: volume target %q overlaps a Lazaret mount", v.Target)
		}
	}
	if d := s.GitCommonDir; d != "" {
		paths["common Git directory"] = d
		for _, fixed := range append([]string{WorkspaceDir, ControlDir}, HostFiles...) {
			if overlaps(d, fixed) {
				return fmt.Errorf("ocispec: common Git directory %q overlaps the Lazaret mount %s", d, fixed)
			}
		}
		for _, a := range s.Anchors {
			if d == a.Target || under(a.Target, d) {
				return fmt.Errorf("ocispec: common Git directory %q would cover the State Anchor %s", d, a.Target)
			}
		}
		if len(s.CommonProtected) == 0 || s.CommonProtected[0].Rel != "." || s.CommonProtected[0].Transient {
			return fmt.Errorf("ocispec: the common Git directory %q itself must be mounted first", d)
		}
	} else if len(s.CommonProtected) != 0 {
		return fmt.Errorf("ocispec: common Git directory mounts without a common Git directory")
	}
	for i, p := range s.CommonProtected {
		if p.Rel == "" || path.IsAbs(p.Rel) || path.Clean(p.Rel) != p.Rel || strings.HasPrefix(p.Rel, "../") || p.Rel == ".." {
			return fmt.Errorf("ocispec: common Git directory path %d %q must be clean and relative", i, p.Rel)
		}
		if !p.Transient && p.Source != path.Join(s.GitCommonDir, p.Rel) {
			return fmt.Errorf("ocispec: common Git directory path %q must bind the same host path, not %q", p.Rel, p.Source)
		}
	}
	for name, p := range paths {
		if !path.IsAbs(p) || path.Clean(p) != p {
			return fmt.Errorf("ocispec: %s %q must be a clean absolute path", name, p)
		}
	}
	if !strings.HasPrefix(s.NetNSPath, "/proc/") || !strings.HasSuffix(s.NetNSPath, "/ns/net") {
		return fmt.Errorf("ocispec: netns path %q is not a /proc/<pid>[/task/<tid>]/ns/net path", s.NetNSPath)
	}
	return nil
}

func process(p Process) *specs.Process {
	caps := append([]string(nil), Capabilities...)
	lc := &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	if p.UID != 0 {
		lc = &specs.LinuxCapabilities{Bounding: caps}
	}
	return &specs.Process{
		Terminal:        p.Terminal,
		User:            specs.User{UID: p.UID, GID: p.GID},
		Args:            append([]string(nil), p.Args...),
		Env:             append([]string(nil), p.Env...),
		Cwd:             p.Cwd,
		Capabilities:    lc,
		Rlimits:         p.Rlimits.posix(),
		NoNewPrivileges: true,
	}
}

// Spec returns the runtime spec of the sandbox whose root process is init.
func Spec(s Sandbox, init Process) (*specs.Spec, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	idmap := IDMappings()
	sp := &specs.Spec{
		Version:  specs.Version,
		Process:  process(init),
		Root:     &specs.Root{Path: "rootfs", Readonly: false},
		Hostname: s.Hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: WorkspaceDir, Type: "bind", Source: s.workspaceSource(), Options: []string{"rbind", "rw"}},
		},
		Linux: &specs.Linux{
			UIDMappings: idmap,
			GIDMappings: idmap,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.UserNamespace},
				{Type: specs.NetworkNamespace, Path: s.NetNSPath},
			},
			// IPv6 is disabled: the derived policy covers IPv4 only (SR-6).
			Sysctl:        map[string]string{"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"},
			MaskedPaths:   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	for _, a := range s.Anchors {
		if !path.IsAbs(a.Source) || path.Clean(a.Source) != a.Source || !path.IsAbs(a.Target) || path.Clean(a.Target) != a.Target || a.Target == "/" {
			return nil, fmt.Errorf("ocispec: State Anchor %q → %q must be clean absolute paths", a.Source, a.Target)
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: a.Target, Type: "bind", Source: a.Source, Options: []string{"rbind", "rw"}})
	}
	for _, p := range s.ProfilePaths {
		if !isProfilePathBind(p) {
			return nil, fmt.Errorf("ocispec: profile path %q → %q must bind a profile's stored directory at a clean absolute guest path outside Lazaret's mounts", p.Source, p.Target)
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: p.Target, Type: "bind", Source: p.Source, Options: []string{"bind", "rw", "nosuid", "nodev"}})
	}
	for _, p := range s.Protected {
		sp.Mounts = append(sp.Mounts, protectedMount(path.Join(WorkspaceDir, p.Rel), p))
	}
	for i, b := range s.IgnoredBinds {
		if err := s.validIgnoredBind(b); err != nil {
			return nil, err
		}
		for _, o := range s.IgnoredBinds[:i] {
			if o.Rel == b.Rel || strings.HasPrefix(b.Rel, o.Rel+"/") || strings.HasPrefix(o.Rel, b.Rel+"/") {
				return nil, fmt.Errorf("ocispec: ignored binds %q and %q overlap", o.Rel, b.Rel)
			}
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: path.Join(WorkspaceDir, b.Rel), Type: "bind", Source: b.Source, Options: []string{"bind", "rw", "nosuid", "nodev"}})
	}
	sp.Mounts = append(sp.Mounts, specs.Mount{Destination: ControlDir, Type: "bind", Source: s.ControlSource, Options: []string{"rbind", "ro"}})
	for _, f := range s.ControlFiles {
		if !strings.HasPrefix(f.Target, ControlDir+"/") || path.Clean(f.Target) != f.Target || !path.IsAbs(f.Source) {
			return nil, fmt.Errorf("ocispec: control file %q → %q must be an absolute source and a clean target under %s", f.Source, f.Target, ControlDir)
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: f.Target, Type: "bind", Source: f.Source, Options: []string{"bind", "ro"}})
	}
	for _, t := range HostFiles {
		src, ok := s.EtcFiles[t]
		if !ok {
			continue
		}
		if !path.IsAbs(src) || path.Clean(src) != src {
			return nil, fmt.Errorf("ocispec: %s source %q must be a clean absolute path", t, src)
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: t, Type: "bind", Source: src, Options: []string{"bind", "rw"}})
	}
	for t := range s.EtcFiles {
		if !isHostFile(t) {
			return nil, fmt.Errorf("ocispec: %q is not one of the generation's host files %v", t, HostFiles)
		}
	}
	if s.MailboxRequests != "" || s.MailboxResults != "" {
		if !path.IsAbs(s.MailboxRequests) || !path.IsAbs(s.MailboxResults) || s.MailboxRequests == s.MailboxResults {
			return nil, fmt.Errorf("ocispec: mailbox sources %q and %q must be two distinct absolute paths", s.MailboxRequests, s.MailboxResults)
		}
		sp.Mounts = append(sp.Mounts,
			specs.Mount{Destination: MailboxRequestsDir, Type: "bind", Source: s.MailboxRequests, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
			specs.Mount{Destination: MailboxResultsDir, Type: "bind", Source: s.MailboxResults, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	for _, v := range s.Volumes {
		mode := "rw"
		if v.ReadOnly {
			mode = "ro"
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: v.Target, Type: "bind", Source: v.Source, Options: []string{"rbind", mode}})
	}
	// The opted-in common Git directory comes last, like a volume at its
	// own path, with its Git Sentry on top (parents first). RS provides
	// its mount point (package mountskel).
	for _, p := range s.CommonProtected {
		sp.Mounts = append(sp.Mounts, protectedMount(path.Join(s.GitCommonDir, p.Rel), p))
	}
	if err := Check(sp, s); err != nil {
		return nil, err
	}
	return sp, nil
}

// Check verifies the security properties of a generated spec; Spec calls it
// and tests call it on mutated specs to show it has teeth.
func Check(sp *specs.Spec, s Sandbox) error {
	if sp.Process == nil || !sp.Process.NoNewPrivileges {
		return fmt.Errorf("ocispec: noNewPrivileges must be set")
	}
	if err := checkCaps(sp.Process.Capabilities); err != nil {
		return err
	}
	want := map[specs.LinuxNamespaceType]bool{specs.PIDNamespace: true, specs.IPCNamespace: true, specs.UTSNamespace: true, specs.MountNamespace: true, specs.UserNamespace: true, specs.NetworkNamespace: true}
	for _, ns := range sp.Linux.Namespaces {
		if !want[ns.Type] {
			return fmt.Errorf("ocispec: unexpected or duplicate %s namespace", ns.Type)
		}
		delete(want, ns.Type)
		if ns.Type == specs.NetworkNamespace {
			if ns.Path != s.NetNSPath {
				return fmt.Errorf("ocispec: network namespace path %q is not the verified %q", ns.Path, s.NetNSPath)
			}
		} else if ns.Path != "" {
			return fmt.Errorf("ocispec: %s namespace joins host path %q; it must be private", ns.Type, ns.Path)
		}
	}
	for name, m := range map[string][]specs.LinuxIDMapping{"uid": sp.Linux.UIDMappings, "gid": sp.Linux.GIDMappings} {
		if fmt.Sprint(m) != fmt.Sprint(IDMappings()) {
			return fmt.Errorf("ocispec: %s map %v is not the guest id map %v", name, m, IDMappings())
		}
	}
	if len(want) != 0 {
		var missing []string
		for t := range want {
			missing = append(missing, string(t))
		}
		sort.Strings(missing)
		return fmt.Errorf("ocispec: missing private namespaces %v", missing)
	}
	for _, m := range sp.Mounts {
		if m.Type != "bind" && !hasOpt(m.Options, "bind") && !hasOpt(m.Options, "rbind") {
			continue
		}
		switch {
		case m.Destination == WorkspaceDir && m.Source == s.workspaceSource():
		case m.Destination == MailboxRequestsDir && m.Source == s.MailboxRequests && s.MailboxRequests != "" && hasOpt(m.Options, "noexec"):
			// The one writable Lazaret mount: request records only.
		case isProtected(s, m):
		case isCommonProtected(s, m):
		case (m.Destination == ControlDir || strings.HasPrefix(m.Destination, ControlDir+"/")) && hasOpt(m.Options, "ro"):
		case isVolume(s.Volumes, m):
		case isHostFile(m.Destination) && s.EtcFiles[m.Destination] == m.Source && !hasOpt(m.Options, "rbind"):
		case isAnchor(s.Anchors, m):
		case isProfilePath(s.ProfilePaths, m):
		case s.isIgnoredBind(m):
		default:
			return fmt.Errorf("ocispec: host path %q mounted at %q is neither the workspace nor a read-only control mount", m.Source, m.Destination)
		}
	}
	return nil
}

// protectedMount is the mount of one Git Sentry path at dst.
func protectedMount(dst string, p Protected) specs.Mount {
	switch {
	case p.Transient:
		return specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=65536k"}}
	case p.ReadOnly:
		return specs.Mount{Destination: dst, Type: "bind", Source: p.Source, Options: []string{"bind", "ro"}}
	default:
		return specs.Mount{Destination: dst, Type: "bind", Source: p.Source, Options: []string{"bind", "rw"}}
	}
}

// under reports whether p lies strictly beneath dir.
func under(p, dir string) bool { return strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }

// overlaps reports whether a and b are equal or one contains the other.
func overlaps(a, b string) bool { return a == b || under(a, b) || under(b, a) }

// isCommonProtected reports whether m is exactly one of the opted-in
// common Git directory's binds: the same host path at the same absolute
// guest path, read-only when planned so.
func isCommonProtected(s Sandbox, m specs.Mount) bool {
	for _, p := range s.CommonProtected {
		if !p.Transient && s.GitCommonDir != "" && m.Destination == path.Join(s.GitCommonDir, p.Rel) && m.Source == m.Destination && hasOpt(m.Options, "ro") == p.ReadOnly {
			return true
		}
	}
	return false
}

// isAnchor reports whether m is exactly one of the declared State Anchors,
// with its source in a bundle's anchor directory and outside Lazaret's
// fixed mounts.
func isAnchor(as []Anchor, m specs.Mount) bool {
	for _, a := range as {
		if a.Source == m.Source && a.Target == m.Destination && path.Base(path.Dir(a.Source)) == "anchors" &&
			a.Target != WorkspaceDir && !strings.HasPrefix(a.Target, WorkspaceDir+"/") && a.Target != ControlDir && !strings.HasPrefix(a.Target, ControlDir+"/") {
			return true
		}
	}
	return false
}

// isProfilePathBind reports whether p binds a profile's stored directory
// (…/profiles/<profile>/paths/<entry>/data) at a guest path that is none
// of Lazaret's mounts nor the root.
func isProfilePathBind(p ProfilePath) bool {
	src, dst := p.Source, p.Target
	if !path.IsAbs(src) || path.Clean(src) != src || !path.IsAbs(dst) || path.Clean(dst) != dst || dst == "/" || isHostFile(dst) {
		return false
	}
	entry := path.Dir(src)
	if path.Base(src) != "data" || path.Base(path.Dir(entry)) != "paths" || path.Base(path.Dir(path.Dir(path.Dir(entry)))) != "profiles" {
		return false
	}
	for _, fixed := range []string{WorkspaceDir, ControlDir} {
		if overlaps(dst, fixed) {
			return false
		}
	}
	return true
}

// isProfilePath reports whether m is exactly one of the declared profile
// path binds, read-write, not recursive.
func isProfilePath(ps []ProfilePath, m specs.Mount) bool {
	for _, p := range ps {
		if p.Source == m.Source && p.Target == m.Destination && isProfilePathBind(p) && !hasOpt(m.Options, "rbind") && hasOpt(m.Options, "nosuid") {
			return true
		}
	}
	return false
}

func isHostFile(t string) bool {
	for _, h := range HostFiles {
		if h == t {
			return true
		}
	}
	return false
}

// isProtected reports whether m is exactly one of the Git Sentry binds: the
// same host path of the workspace, read-only when planned so.
func isProtected(s Sandbox, m specs.Mount) bool {
	for _, p := range s.Protected {
		if !p.Transient && m.Destination == path.Join(WorkspaceDir, p.Rel) && m.Source == p.Source && s.sameWorkspacePath(p.Rel, m.Source) && hasOpt(m.Options, "ro") == p.ReadOnly {
			return true
		}
	}
	return false
}

// isVolume reports whether m is exactly one of the configured volumes.
func isVolume(vs []Volume, m specs.Mount) bool {
	for _, v := range vs {
		if v.Source == m.Source && v.Target == m.Destination && hasOpt(m.Options, "ro") == v.ReadOnly {
			return true
		}
	}
	return false
}

func checkCaps(c *specs.LinuxCapabilities) error {
	if c == nil {
		return nil
	}
	for _, set := range [][]string{c.Bounding, c.Effective, c.Permitted, c.Inheritable, c.Ambient} {
		for _, cap := range set {
			if forbiddenCaps[cap] {
				return fmt.Errorf("ocispec: guest capability %s is forbidden", cap)
			}
		}
	}
	return nil
}

func hasOpt(opts []string, o string) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// ProcessJSON returns the `runsc exec --process` document for p.
func ProcessJSON(p Process) ([]byte, error) {
	if !path.IsAbs(p.Cwd) {
		return nil, fmt.Errorf("ocispec: cwd %q must be absolute", p.Cwd)
	}
	if len(p.Args) == 0 {
		return nil, fmt.Errorf("ocispec: empty command")
	}
	pr := process(p)
	if err := checkCaps(pr.Capabilities); err != nil {
		return nil, err
	}
	return json.Marshal(pr)
}

// Marshal encodes a spec as config.json.
func Marshal(sp *specs.Spec) ([]byte, error) { return json.MarshalIndent(sp, "", "  ") }
