package config

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/netpolicy"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// MaxFileSize bounds the configuration file.
const MaxFileSize = 1 << 20

// Built-in image names: `lazaret image build NAME` builds them as OCI
// layouts in $XDG_DATA_HOME/lazaret/images/NAME.
var builtinImages = []string{"busybox", "debian"}

// BuiltinImages returns the built-in image names.
func BuiltinImages() []string { return append([]string(nil), builtinImages...) }

// DefaultImage is the image of a profile that sets none.
const DefaultImage = "debian"

// DefaultDeny lists the IPv4 prefixes every profile denies (spec §3.6): the
// RFC 1918 private ranges (the developer's LAN, the slirp4netns gateway
// 10.0.2.2 that forwards to the host's loopback), link-local 169.254/16
// (cloud instance metadata services at 169.254.169.254 hand out
// credentials) and the RFC 6598 shared space 100.64/10 (carrier-grade NAT
// and overlay VPNs such as Tailscale, which reach private machines). A
// profile may allow a more specific prefix inside them; an allow of exactly
// one of these prefixes is a conflict.
var DefaultDeny = netpolicy.DefaultDeny

// EditorConfigDirs are the workspace editor configuration entries hidden
// behind sandbox-local transient storage unless share_editor_config is set
// (spec §3.4): host editors execute tasks and settings from them — a Dev
// Container's (.devcontainer/, .devcontainer.json) initializeCommand runs
// on the host, and its image is built by the host's container engine.
var EditorConfigDirs = []string{".vscode", ".idea", ".zed", ".helix", ".nvim.lua", ".exrc", ".devcontainer", ".devcontainer.json"}

// Profile is one validated, effective Agent Profile.
type Profile struct {
	Name string `json:"name"`
	// Description is shown by `lazaret profile list`; not fingerprinted.
	Description string `json:"description,omitempty"`
	// Builtin reports a profile Lazaret defines (the file may amend it).
	Builtin bool `json:"builtin"`
	// Image is the image reference as configured: a built-in image name or
	// an `oci:` / `docker://` reference; "" when Recipe builds the image.
	Image string `json:"image"`
	// Recipe, when not nil, builds the profile's image (exclusive with
	// Image): see Recipe and ImageRef.
	Recipe *Recipe `json:"recipe,omitempty"`
	// Command is the argv `lazaret run` runs when given none (nil: the
	// image's login shell). Not fingerprinted: it changes what a client
	// asks for, not what the sandbox is.
	Command []string `json:"command,omitempty"`
	// PersistentPaths are absolute guest paths kept in the Domain's State
	// Anchor across restarts (sorted).
	PersistentPaths []string `json:"persistent_paths"`
	// ProfilePaths are absolute guest directories kept per profile, shared
	// by every workspace's Domain of this profile (sorted; "~/" resolved
	// against the session user's home): the login state of an agent.
	ProfilePaths []string `json:"profile_paths"`
	Network      Network  `json:"network"`
	// Env is passed into every guest process of the sandbox.
	Env map[string]string `json:"env"`
	// EnvPass names variables each session's Client CLI copies from its
	// invoking environment into that session (sorted). Values are never
	// part of the profile.
	EnvPass []string `json:"env_pass"`
	// Secrets are variables each session's Client CLI resolves on the
	// host (from its environment or a command) into that session.
	Secrets map[string]Secret `json:"secrets"`
	// Ports are host ports forwarded into the sandbox (sorted by host).
	Ports []Port `json:"ports"`
	// AutoApprove are the escalation argv prefixes approved without asking.
	AutoApprove []Rule `json:"auto_approve"`
	// IgnoredPathIsolation redirects Git-ignored workspace paths to
	// Ignored Workspace State (FR-9, SR-13). Default true.
	IgnoredPathIsolation bool `json:"ignored_path_isolation"`
	// IgnoredBinds serves ignored directories (those with Ignored
	// Workspace State at generation start and the ignore rules' top-level
	// directory patterns) as direct binds of their state copies instead of
	// through the Git-routing daemon (package ignoredbind). Default true;
	// only with IgnoredPathIsolation.
	IgnoredBinds bool `json:"ignored_binds"`
	// ShareEditorConfig exposes EditorConfigDirs of the workspace to the
	// sandbox instead of hiding them. Default false.
	ShareEditorConfig bool `json:"share_editor_config"`
	// GitCommonDir opts in to mounting the repository's common Git
	// directory when the workspace is a linked worktree (SR-3: a
	// developer-configured volume at the same absolute path, with the Git
	// Sentry applied there). Default false: a linked worktree is refused.
	// `lazaret run --git-common-dir` sets it for one start.
	GitCommonDir bool     `json:"git_common_dir"`
	Volumes      []Volume `json:"volumes"`
	// User is the guest user sessions run as: RootUser (the default) or a
	// name that the guest init creates in the image if it is missing, with
	// uid and gid UserID and home /home/<name>. Workspace files are the
	// developer's on the host and appear as this user's inside.
	User string `json:"user"`
	// UserID is User's uid and gid (DefaultUserID when not configured; 0
	// for root).
	UserID uint32 `json:"user_id"`
	// HostCA gives the sandbox the host's CA bundle read-only at
	// HostCAGuestPath (as a volume, so it is fingerprinted) with the
	// variables that make TLS clients trust it: what the host trusts
	// (e.g. a TLS-inspecting proxy's CA) the sandbox trusts too. On for the
	// built-in node, claude and codex profiles.
	HostCA bool `json:"host_ca"`
	// Linger keeps the Domain up this long after its last session leaves,
	// so that a following `lazaret run` joins it (0: stop at once; at most
	// MaxLinger). It is not fingerprinted: it changes when the sandbox
	// stops, not what it is, and travels with each session's request.
	Linger time.Duration `json:"linger"`
	// Limits are the configured resource limits (zero: the default, see
	// Limits.Effective).
	Limits Limits `json:"limits"`
}

// HostCAGuestPath is where a host_ca profile sees the host's CA bundle.
const HostCAGuestPath = "/run/lazaret-host-ca.crt"

// HostCAVariables are set to HostCAGuestPath in a host_ca profile: OpenSSL
// (curl, Python, Rust's native TLS), curl, Git's GnuTLS, Node.js (npm,
// Claude Code) and Python's requests.
var HostCAVariables = []string{"SSL_CERT_FILE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE"}

// HostCABundle is the host's CA bundle with symlinks resolved:
// $SSL_CERT_FILE when absolute, else Debian's or Fedora's usual file; ""
// when there is none.
func HostCABundle(getenv func(string) string) string {
	for _, p := range []string{getenv("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if st, err := os.Stat(r); err == nil && st.Mode().IsRegular() {
			return filepath.Clean(r)
		}
	}
	return ""
}

// MaxLinger is the longest a Domain lingers after its last session.
const MaxLinger = 24 * time.Hour

// ParseLinger parses a linger duration ("10m", "1h30m", "90s", "0"): a
// Go duration from 0 to MaxLinger, or a message saying what is wrong.
func ParseLinger(s string) (time.Duration, string) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	switch {
	case strings.TrimSpace(s) == "0":
		return 0, ""
	case err != nil:
		return 0, fmt.Sprintf("%q is not a duration: write it like \"10m\", \"1h30m\" or \"90s\" (0 stops the Domain with its last session)", s)
	case d < 0 || d > MaxLinger:
		return 0, fmt.Sprintf("%q: a linger is from 0 to %s", s, MaxLinger)
	}
	return d, ""
}

// RootUser is the guest superuser, the default User.
const RootUser = "root"

// DefaultUserID is the uid and gid of a configured non-root User: the
// first regular user of Debian and of the devcontainer convention.
const DefaultUserID = 1000

// MaxUserID is the largest configurable user_id (65534 is nobody).
const MaxUserID = 65533

// GuestUser is a profile's resolved session user.
type GuestUser struct {
	Name     string
	UID, GID uint32
	Home     string
}

// IsRoot reports whether u is the guest superuser.
func (u GuestUser) IsRoot() bool { return u.UID == 0 }

// SessionUser resolves p's User.
func (p *Profile) SessionUser() GuestUser {
	if p.User == "" || p.User == RootUser {
		return GuestUser{Name: RootUser, Home: "/root"}
	}
	return GuestUser{Name: p.User, UID: p.UserID, GID: p.UserID, Home: "/home/" + p.User}
}

// Network is a profile's effective network policy input: Deny includes
// DefaultDeny. All prefixes are canonical IPv4 and sorted.
type Network struct {
	Allow []netip.Prefix `json:"allow"`
	Deny  []netip.Prefix `json:"deny"`
	DNS   []netip.Addr   `json:"dns"`
	// AllowHosts are, in the deny mode, host names the Host Coordinator
	// resolves at generation start into exact /32 allow routes, pinned for
	// the generation; in the allowlist mode, the host rules (NAME, *.NAME,
	// either with :PORT) the egress proxy admits.
	AllowHosts []string `json:"allow_hosts"`
	// Mode is ModeDeny (default permit except the denies) or ModeAllowlist
	// (only AllowHosts and AllowPresets, through the egress proxy).
	Mode string `json:"mode"`
	// AllowPresets name tables of host rules (netpolicy.Presets).
	AllowPresets []string `json:"allow_presets,omitempty"`
	// Ask: a request outside the allowlist is put to the session's
	// developer at the terminal.
	Ask bool `json:"ask,omitempty"`
}

// Network modes.
const (
	ModeDeny      = "deny"
	ModeAllowlist = "allowlist"
)

// HostRules are the allowlist mode's host rules: AllowHosts, then every
// preset's, each with where it came from.
func (n Network) HostRules(profile string) []netpolicy.HostRuleSource {
	var out []netpolicy.HostRuleSource
	for _, h := range n.AllowHosts {
		if r, err := netpolicy.ParseHostRule(h); err == nil {
			out = append(out, netpolicy.HostRuleSource{Rule: r, Source: "profile " + profile + " network.allow_hosts"})
		}
	}
	for _, p := range n.AllowPresets {
		for _, h := range netpolicy.Presets[p] {
			if r, err := netpolicy.ParseHostRule(h); err == nil {
				out = append(out, netpolicy.HostRuleSource{Rule: r, Source: "preset " + p + " (profile " + profile + " network.allow_presets)"})
			}
		}
	}
	return out
}

// RuleMatch is how an auto-approve rule's argv is compared with a request's.
type RuleMatch string

const (
	// MatchExact approves exactly Argv: no element more or less.
	MatchExact RuleMatch = "exact"
	// MatchPrefix approves Argv followed by any further arguments.
	MatchPrefix RuleMatch = "prefix"
)

// WorkspaceRoot is Rule.Cwd for /workspace itself.
const WorkspaceRoot = "."

// Rule is an escalation auto-approve rule (spec §3.7, AutoApprove): a
// request is approved without a prompt when its argv equals Argv (exact) or
// begins with exactly these elements (prefix), and its working directory
// satisfies the optional Cwd constraint. The program is never a shell or
// command runner and no element contains shell syntax (validated when the
// configuration is parsed); a request that requires a shell never matches
// (RequiresShell, checked at match time whatever the rule says).
type Rule struct {
	Match RuleMatch `json:"match"`
	Argv  []string  `json:"argv"`
	// Cwd, when not empty, constrains the request's working directory: a
	// clean path relative to /workspace without "..", or WorkspaceRoot.
	// Requests run in the host directory reached from the workspace without
	// symlinks, so the lexical comparison is the directory's identity.
	Cwd string `json:"cwd,omitempty"`
	// CwdSubtree extends Cwd to every directory beneath it.
	CwdSubtree bool `json:"cwd_subtree,omitempty"`
}

// String is the rule as a developer reads it in messages and the audit log.
func (r Rule) String() string {
	s := fmt.Sprintf("%s %q", r.Match, r.Argv)
	if r.Cwd != "" {
		s += " in " + ruleCwdText(r.Cwd)
		if r.CwdSubtree {
			s += " and beneath"
		}
	}
	return s
}

func ruleCwdText(cwd string) string {
	if cwd == WorkspaceRoot {
		return "/workspace"
	}
	return "/workspace/" + cwd
}

// Matches reports whether r approves argv run in cwd (relative to
// /workspace, "" or "." for the workspace itself). It never matches a
// command that requires a shell, an empty rule, or a working directory that
// is not a clean path inside the workspace.
func (r Rule) Matches(argv []string, cwd string) bool {
	if len(r.Argv) == 0 || RequiresShell(argv) {
		return false
	}
	switch r.Match {
	case MatchExact:
		if len(argv) != len(r.Argv) {
			return false
		}
	case MatchPrefix:
		if len(argv) < len(r.Argv) {
			return false
		}
	default:
		return false
	}
	for i, a := range r.Argv {
		if argv[i] != a {
			return false
		}
	}
	return r.cwdMatches(cwd)
}

func (r Rule) cwdMatches(cwd string) bool {
	if cwd == "" {
		cwd = WorkspaceRoot
	}
	if checkRuleCwd(cwd) != "" { // not clean, absolute, or outside
		return false
	}
	switch {
	case r.Cwd == "":
		return true
	case cwd == r.Cwd:
		return true
	case !r.CwdSubtree:
		return false
	case r.Cwd == WorkspaceRoot:
		return true
	default:
		return strings.HasPrefix(cwd, r.Cwd+"/")
	}
}

// Volume is an extra host directory or file bind-mounted into the sandbox.
type Volume struct {
	// Source is the absolute, lexically clean host path (~ expanded);
	// Confine resolves it.
	Source string `json:"source"`
	// Target is the absolute guest path.
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
}

// Config is a validated host configuration.
type Config struct {
	// Path is the configuration file read ("" when none exists and only the
	// built-in profiles apply).
	Path     string
	profiles map[string]*Profile
	// Programs maps a name of ProgramNames to its configured path
	// ([programs]); package locate consults it after LAZARET_<NAME>.
	Programs map[string]string
}

// Names returns the profile names, sorted.
func (c *Config) Names() []string {
	names := make([]string, 0, len(c.profiles))
	for n := range c.profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Profiles returns every profile, sorted by name.
func (c *Config) Profiles() []*Profile {
	var out []*Profile
	for _, n := range c.Names() {
		out = append(out, c.profiles[n])
	}
	return out
}

// Profile returns the named profile.
func (c *Config) Profile(name string) (*Profile, error) {
	p, ok := c.profiles[name]
	if !ok {
		where := "built in"
		if c.Path != "" {
			where = "built in or defined in " + c.Path
		}
		return nil, errdefs.New(errdefs.ErrInvalid, "unknown profile %q: the profiles %s are %s; define [profiles.%s] in the configuration file to add it", name, where, strings.Join(c.Names(), ", "), name)
	}
	return p, nil
}

// Builtin returns the configuration with no file: the built-in profiles.
func Builtin() *Config {
	c, err := Parse("", nil, Options{})
	if err != nil {
		panic("config: built-in configuration invalid: " + err.Error())
	}
	return c
}

// Options carries the host facts parsing needs.
type Options struct {
	// Home is the developer's home directory: `~/` in a volume source
	// expands to it, and it is refused as a volume source. When empty,
	// `~/` is an error.
	Home string
	// HostCABundle is the host's CA bundle (HostCABundle) that host_ca
	// profiles receive; "" gives them nothing.
	HostCABundle string
}

// DefaultPath returns $XDG_CONFIG_HOME/lazaret/config.toml, or
// $HOME/.config/lazaret/config.toml.
func DefaultPath(getenv func(string) string) (string, error) {
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home := getenv("HOME")
		if home == "" {
			return "", errdefs.New(errdefs.ErrInvalid, "neither XDG_CONFIG_HOME nor HOME is set: set HOME or pass --config")
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "lazaret", "config.toml"), nil
}

// Load reads and validates the configuration. explicitPath is the --config
// value ("" for the default location). A missing file at the default
// location means the built-in configuration; a missing explicit file is an
// error. The returned Config.Path is absolute but not symlink-resolved:
// Confine resolves it.
func Load(explicitPath string, getenv func(string) string) (*Config, error) {
	path := explicitPath
	if path == "" {
		p, err := DefaultPath(getenv)
		if err != nil {
			return nil, err
		}
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(abs)
	if err != nil {
		if os.IsNotExist(err) && explicitPath == "" {
			return Parse("", nil, hostOptions(getenv))
		}
		return nil, errdefs.Mark(fmt.Errorf("read configuration: %w", err), errdefs.ErrInvalid)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errdefs.New(errdefs.ErrInvalid, "configuration %s is not a regular file", abs)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, errdefs.New(errdefs.ErrRefused, "configuration %s is writable by group or others (mode %04o): it is trusted host configuration; run `chmod go-w %s`", abs, st.Mode().Perm(), abs)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read configuration %s: %w", abs, err)
	}
	if len(data) > MaxFileSize {
		return nil, errdefs.New(errdefs.ErrInvalid, "configuration %s is larger than %d bytes", abs, MaxFileSize)
	}
	return Parse(abs, data, hostOptions(getenv))
}

// hostOptions are the host facts Load parses with.
func hostOptions(getenv func(string) string) Options {
	return Options{Home: getenv("HOME"), HostCABundle: HostCABundle(getenv)}
}
