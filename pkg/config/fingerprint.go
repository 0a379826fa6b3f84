package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// canonicalVersion is the version of the canonical profile encoding; a
// change of encoding changes every fingerprint, which is intended. Version
// 3: auto_approve rules are objects (match exact/prefix, argv, optional cwd
// and cwd_subtree) instead of argv prefixes.
const canonicalVersion = 3

// canonicalProfile is the fingerprinted projection of a Profile: every
// setting that changes what the sandbox is or may do, and nothing cosmetic
// (the description, the Builtin flag). Lists are sorted and maps are
// encoded with sorted keys by encoding/json, so the bytes do not depend on
// the order, whitespace or comments of the file.
type canonicalProfile struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	Image   string `json:"image"`
	// Recipe is the recipe's digest (RecipeDigest), not its steps: a
	// changed step changes the fingerprint, the image and the profile.
	Recipe          string   `json:"recipe,omitempty"`
	PersistentPaths []string `json:"persistent_paths"`
	Allow           []string `json:"network_allow"`
	Deny            []string `json:"network_deny"`
	DNS             []string `json:"network_dns"`
	AllowHosts      []string `json:"network_allow_hosts"`
	// NetMode, AllowPresets and Ask: omitted in the default deny mode, so
	// such a profile keeps its fingerprint.
	NetMode              string            `json:"network_mode,omitempty"`
	AllowPresets         []string          `json:"network_allow_presets,omitempty"`
	Ask                  bool              `json:"network_ask,omitempty"`
	Env                  map[string]string `json:"env"`
	AutoApprove          []Rule            `json:"auto_approve"`
	IgnoredPathIsolation bool              `json:"ignored_path_isolation"`
	// NoIgnoredBinds: ignored_binds = false; omitted by default, so such a
	// profile keeps its fingerprint.
	NoIgnoredBinds    bool     `json:"no_ignored_binds,omitempty"`
	ShareEditorConfig bool     `json:"share_editor_config"`
	GitCommonDir      bool     `json:"git_common_dir,omitempty"`
	Volumes           []Volume `json:"volumes"`
	// User and UserID: omitted for root, so a root profile keeps the
	// fingerprint it had before users were configurable.
	User   string `json:"user,omitempty"`
	UserID uint32 `json:"user_id,omitempty"`
	// EnvPass and Secrets name the credentials sessions receive and where
	// they come from, never their values; Ports are the forwarded ports
	// (ADDR:HOST:GUEST). Omitted when empty, so a profile without them
	// keeps its fingerprint.
	EnvPass []string          `json:"env_pass,omitempty"`
	Secrets map[string]Secret `json:"secrets,omitempty"`
	Ports   []string          `json:"ports,omitempty"`
	// ProfilePaths are the guest directories bound from the profile's
	// shared state: what the sandbox mounts. Omitted when empty, so a
	// profile without them keeps its fingerprint.
	ProfilePaths []string `json:"profile_paths,omitempty"`
	// Limits holds only the configured limits, and is omitted when none
	// is: defaults (which follow the host) are not fingerprinted.
	Limits *Limits `json:"limits,omitempty"`
}

func (p *Profile) canonical() canonicalProfile {
	c := canonicalProfile{
		Version:              canonicalVersion,
		Name:                 p.Name,
		Image:                p.Image,
		PersistentPaths:      append([]string{}, p.PersistentPaths...),
		Env:                  map[string]string{},
		AutoApprove:          []Rule{},
		IgnoredPathIsolation: p.IgnoredPathIsolation,
		NoIgnoredBinds:       !p.IgnoredBinds,
		ShareEditorConfig:    p.ShareEditorConfig,
		GitCommonDir:         p.GitCommonDir,
		Volumes:              append([]Volume{}, p.Volumes...),
		Allow:                []string{},
		Deny:                 []string{},
		DNS:                  []string{},
		AllowHosts:           append([]string{}, p.Network.AllowHosts...),
	}
	if p.Recipe != nil {
		c.Recipe = p.Recipe.Digest
	}
	if p.Network.Mode == ModeAllowlist {
		c.NetMode = ModeAllowlist
	}
	c.AllowPresets = append([]string(nil), p.Network.AllowPresets...)
	sort.Strings(c.AllowPresets)
	c.Ask = p.Network.Ask
	sort.Strings(c.PersistentPaths)
	sort.Strings(c.AllowHosts)
	for k, v := range p.Env {
		c.Env[k] = v
	}
	for _, r := range p.AutoApprove {
		r.Argv = append([]string{}, r.Argv...)
		c.AutoApprove = append(c.AutoApprove, r)
	}
	sortRules(c.AutoApprove)
	sort.Slice(c.Volumes, func(i, j int) bool { return c.Volumes[i].Target < c.Volumes[j].Target })
	if u := p.SessionUser(); !u.IsRoot() {
		c.User, c.UserID = u.Name, u.UID
	}
	c.EnvPass = append([]string(nil), p.EnvPass...)
	sort.Strings(c.EnvPass)
	if len(p.Secrets) > 0 {
		c.Secrets = map[string]Secret{}
		for n, s := range p.Secrets {
			s.Command = append([]string(nil), s.Command...)
			c.Secrets[n] = s
		}
	}
	c.ProfilePaths = append([]string(nil), p.ProfilePaths...)
	sort.Strings(c.ProfilePaths)
	if !p.Limits.IsZero() {
		l := p.Limits
		c.Limits = &l
	}
	ports := append([]Port(nil), p.Ports...)
	SortPorts(ports)
	for _, pt := range ports {
		c.Ports = append(c.Ports, pt.String())
	}
	allow := append([]netip.Prefix{}, p.Network.Allow...)
	deny := append([]netip.Prefix{}, p.Network.Deny...)
	sortPrefixes(allow)
	sortPrefixes(deny)
	for _, pf := range allow {
		c.Allow = append(c.Allow, pf.String())
	}
	for _, pf := range deny {
		c.Deny = append(c.Deny, pf.String())
	}
	dns := append([]netip.Addr{}, p.Network.DNS...)
	sort.Slice(dns, func(i, j int) bool { return dns[i].Less(dns[j]) })
	for _, a := range dns {
		c.DNS = append(c.DNS, a.String())
	}
	return c
}

// Canonical returns the canonical encoding of the profile: compact JSON
// with a fixed field order, sorted lists and sorted map keys. It is what the
// fingerprint digests, and what a CLI hands to a Host Coordinator so that a
// mismatch can be explained (FromCanonical).
func (p *Profile) Canonical() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p.canonical()); err != nil {
		panic("config: encode canonical profile: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// fingerprintContext domain-separates the digest (spec §3.7 form).
const fingerprintContext = "lazaret/v1/configuration-fingerprint"

// Fingerprint is the Configuration Fingerprint of a validated profile:
// "sha256:" and the hex SHA-256 of the domain-separated canonical encoding
// (context, 8-byte big-endian length, bytes). The built-in defaults that
// apply (DefaultDeny, default image and booleans) are part of the effective
// profile and so of the digest.
func (p *Profile) Fingerprint() string {
	return FingerprintOf(p.Canonical())
}

// FingerprintOf digests canonical profile bytes.
func FingerprintOf(canonical []byte) string {
	h := sha256.New()
	h.Write([]byte(fingerprintContext))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(canonical)))
	h.Write(n[:])
	h.Write(canonical)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// FromCanonical decodes canonical profile bytes (from a peer that is
// trusted to have validated them) and checks that they are canonical: the
// re-encoding is byte-identical, so the fingerprint of the result equals
// FingerprintOf(b).
func FromCanonical(b []byte) (*Profile, error) {
	var c canonicalProfile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("decode canonical profile: %w", err), errdefs.ErrCorrupt)
	}
	if c.Version != canonicalVersion {
		return nil, errdefs.New(errdefs.ErrRefused, "canonical profile version %d is not %d: use matching lazaret binaries", c.Version, canonicalVersion)
	}
	p := &Profile{
		Name:                 c.Name,
		Image:                c.Image,
		PersistentPaths:      c.PersistentPaths,
		Env:                  c.Env,
		IgnoredPathIsolation: c.IgnoredPathIsolation,
		IgnoredBinds:         !c.NoIgnoredBinds,
		ShareEditorConfig:    c.ShareEditorConfig,
		GitCommonDir:         c.GitCommonDir,
		Volumes:              c.Volumes,
		User:                 RootUser,
		UserID:               c.UserID,
	}
	if c.User != "" {
		p.User = c.User
	}
	if c.Limits != nil {
		p.Limits = *c.Limits
	}
	p.EnvPass = append([]string{}, c.EnvPass...)
	p.ProfilePaths = append([]string{}, c.ProfilePaths...)
	p.Secrets = map[string]Secret{}
	for n, s := range c.Secrets {
		p.Secrets[n] = s
	}
	p.Ports = []Port{}
	for _, s := range c.Ports {
		var pt Port
		if err := pt.UnmarshalText([]byte(s)); err != nil {
			return nil, errdefs.Mark(fmt.Errorf("canonical profile: %w", err), errdefs.ErrCorrupt)
		}
		p.Ports = append(p.Ports, pt)
	}
	if c.Recipe != "" {
		// Only the digest travels: the coordinator runs the built image.
		p.Recipe = &Recipe{Digest: c.Recipe}
	}
	p.AutoApprove = c.AutoApprove
	for _, s := range c.Allow {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, errdefs.Mark(fmt.Errorf("canonical profile: %w", err), errdefs.ErrCorrupt)
		}
		p.Network.Allow = append(p.Network.Allow, pf)
	}
	for _, s := range c.Deny {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, errdefs.Mark(fmt.Errorf("canonical profile: %w", err), errdefs.ErrCorrupt)
		}
		p.Network.Deny = append(p.Network.Deny, pf)
	}
	p.Network.AllowHosts = append([]string{}, c.AllowHosts...)
	p.Network.Mode = ModeDeny
	if c.NetMode == ModeAllowlist {
		p.Network.Mode = ModeAllowlist
	}
	p.Network.AllowPresets = append([]string(nil), c.AllowPresets...)
	p.Network.Ask = c.Ask
	for _, s := range c.DNS {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, errdefs.Mark(fmt.Errorf("canonical profile: %w", err), errdefs.ErrCorrupt)
		}
		p.Network.DNS = append(p.Network.DNS, a)
	}
	if !bytes.Equal(p.Canonical(), b) {
		return nil, errdefs.New(errdefs.ErrCorrupt, "canonical profile bytes are not in canonical form")
	}
	return p, nil
}

// Diff describes, one line per setting, what differs from profile a (the
// running Domain's) to b (the joining session's). Env values are never
// printed (they may be secrets), only which names changed. Empty when the
// fingerprints are equal.
func Diff(a, b *Profile) []string {
	ca, cb := a.canonical(), b.canonical()
	var out []string
	scalar := func(key, x, y string) {
		if x != y {
			out = append(out, fmt.Sprintf("%s: %s → %s", key, x, y))
		}
	}
	set := func(key string, x, y []string) {
		added, removed := setDiff(x, y)
		var parts []string
		if len(added) > 0 {
			parts = append(parts, "added "+strings.Join(added, ", "))
		}
		if len(removed) > 0 {
			parts = append(parts, "removed "+strings.Join(removed, ", "))
		}
		if len(parts) > 0 {
			out = append(out, key+": "+strings.Join(parts, "; "))
		}
	}
	scalar("profile", fmt.Sprintf("%q", ca.Name), fmt.Sprintf("%q", cb.Name))
	scalar("image", fmt.Sprintf("%q", ca.Image), fmt.Sprintf("%q", cb.Image))
	scalar("recipe", recipeOf(ca), recipeOf(cb))
	set("persistent_paths", ca.PersistentPaths, cb.PersistentPaths)
	set("network.allow", ca.Allow, cb.Allow)
	set("network.deny", ca.Deny, cb.Deny)
	set("network.dns", ca.DNS, cb.DNS)
	set("network.allow_hosts", ca.AllowHosts, cb.AllowHosts)
	scalar("network.mode", modeOf(ca.NetMode), modeOf(cb.NetMode))
	set("network.allow_presets", ca.AllowPresets, cb.AllowPresets)
	scalar("network.ask", fmt.Sprint(ca.Ask), fmt.Sprint(cb.Ask))
	var envA, envB []string
	var changed []string
	for k, v := range ca.Env {
		envA = append(envA, k)
		if w, ok := cb.Env[k]; ok && w != v {
			changed = append(changed, k)
		}
	}
	for k := range cb.Env {
		envB = append(envB, k)
	}
	set("env", envA, envB)
	set("env_pass", ca.EnvPass, cb.EnvPass)
	var secA, secB []string
	for n, s := range ca.Secrets {
		secA = append(secA, n+" "+s.String())
	}
	for n, s := range cb.Secrets {
		secB = append(secB, n+" "+s.String())
	}
	set("secrets", secA, secB)
	set("ports", ca.Ports, cb.Ports)
	set("profile_paths", ca.ProfilePaths, cb.ProfilePaths)
	if len(changed) > 0 {
		sort.Strings(changed)
		out = append(out, "env: value changed for "+strings.Join(changed, ", "))
	}
	var rulesA, rulesB []string
	for _, r := range ca.AutoApprove {
		rulesA = append(rulesA, r.String())
	}
	for _, r := range cb.AutoApprove {
		rulesB = append(rulesB, r.String())
	}
	set("auto_approve", rulesA, rulesB)
	scalar("ignored_path_isolation", fmt.Sprint(ca.IgnoredPathIsolation), fmt.Sprint(cb.IgnoredPathIsolation))
	scalar("ignored_binds", fmt.Sprint(!ca.NoIgnoredBinds), fmt.Sprint(!cb.NoIgnoredBinds))
	scalar("share_editor_config", fmt.Sprint(ca.ShareEditorConfig), fmt.Sprint(cb.ShareEditorConfig))
	scalar("git_common_dir", fmt.Sprint(ca.GitCommonDir), fmt.Sprint(cb.GitCommonDir))
	scalar("user", userOf(ca), userOf(cb))
	la, lb := limitsOf(ca), limitsOf(cb)
	scalar("limits.memory", limitText(la.Memory, FormatSize), limitText(lb.Memory, FormatSize))
	scalar("limits.processes", limitText(la.Processes, nil), limitText(lb.Processes, nil))
	scalar("limits.open_files", limitText(la.OpenFiles, nil), limitText(lb.OpenFiles, nil))
	var volA, volB []string
	for _, v := range ca.Volumes {
		volA = append(volA, v.String())
	}
	for _, v := range cb.Volumes {
		volB = append(volB, v.String())
	}
	set("volumes", volA, volB)
	if len(out) == 0 && a.Fingerprint() != b.Fingerprint() {
		out = append(out, "the canonical encodings differ") // a new setting Diff does not know yet
	}
	return out
}

// String renders a volume as source:target:mode.
func (v Volume) String() string {
	mode := "rw"
	if v.ReadOnly {
		mode = "ro"
	}
	return v.Source + ":" + v.Target + ":" + mode
}

// setDiff returns the elements of y not in x (added) and of x not in y
// (removed), sorted.
func setDiff(x, y []string) (added, removed []string) {
	in := func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, e := range s {
			m[e] = true
		}
		return m
	}
	mx, my := in(x), in(y)
	for e := range my {
		if !mx[e] {
			added = append(added, e)
		}
	}
	for e := range mx {
		if !my[e] {
			removed = append(removed, e)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}

// MismatchError explains a configuration mismatch between a running Domain
// and a joining session (the model's RejectConfigurationMismatch); remedy
// is the sentence that tells the developer how to get past it (the
// Domain's state decides it: see MismatchRemedy).
func MismatchError(running, joining *Profile, remedy string) error {
	changes := Diff(running, joining)
	return errdefs.New(errdefs.ErrRefused, "configuration mismatch: the running Domain of profile %q was started with configuration %s, this session has %s; what changed: %s. %s",
		running.Name, short(running.Fingerprint()), short(joining.Fingerprint()), strings.Join(changes, "; "), remedy)
}

// DomainActivity is what a running Domain is doing when a session with
// another configuration arrives; it decides MismatchRemedy's advice.
type DomainActivity int

const (
	// WithSessions: published, with sessions.
	WithSessions DomainActivity = iota
	// Lingering: published, no session, its linger counting down.
	Lingering
	// Starting: not yet published; the session that started it (and any
	// that arrived meanwhile) waits for it.
	Starting
)

// MismatchRemedy is MismatchError's remedy for a Domain that the command
// stop stops, with the given linger (0: none), doing what: lingering (no
// session, the linger counting down, left remaining) it is stopped or the
// change undone; with sessions, or starting for them, they are waited for
// (then its linger) or the change undone, and a stop, which would end
// those sessions too, is named as such.
func MismatchRemedy(stop string, linger, left time.Duration, what DomainActivity) string {
	then := "the Domain then stops"
	if linger > 0 {
		then = fmt.Sprintf("the Domain then stops after lingering %s", linger)
	}
	switch what {
	case Lingering:
		return fmt.Sprintf("It lingers with no session (%s left): `%s` ends it now, or undo the change", left.Round(time.Second), stop)
	case Starting:
		return fmt.Sprintf("It is starting for another `lazaret run`: wait for that run to end (%s) or undo the change; `%s` ends the Domain and the runs waiting for it now", then, stop)
	}
	return fmt.Sprintf("Wait for its sessions to end (%s) or undo the change; `%s` ends the Domain and its sessions now", then, stop)
}

func short(fp string) string {
	if len(fp) > len("sha256:")+12 {
		return fp[:len("sha256:")+12]
	}
	return fp
}

// userOf names a canonical profile's session user for a diff.
func userOf(c canonicalProfile) string {
	if c.User == "" {
		return RootUser
	}
	return fmt.Sprintf("%s (uid %d)", c.User, c.UserID)
}

// recipeOf names a canonical profile's recipe for a diff.
func recipeOf(c canonicalProfile) string {
	if c.Recipe == "" {
		return "none"
	}
	return short(c.Recipe)
}

// limitsOf returns a canonical profile's configured limits.
func limitsOf(c canonicalProfile) Limits {
	if c.Limits == nil {
		return Limits{}
	}
	return *c.Limits
}

// limitText renders one configured limit for a diff ("default" when unset).
func limitText(n uint64, format func(uint64) string) string {
	switch {
	case n == 0:
		return "default"
	case format != nil:
		return format(n)
	}
	return fmt.Sprint(n)
}

func modeOf(m string) string {
	if m == "" {
		return ModeDeny
	}
	return m
}
