package config

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// MaxProfilePaths bounds a profile's profile_paths.
const MaxProfilePaths = 16

// maxProfilePathLen bounds one profile path: its escaped form names one
// directory on the host (at most 255 bytes).
const maxProfilePathLen = 200

// profileReserved are guest paths a profile path may not be or lie in:
// Lazaret's own mounts and the kernel's file systems.
var profileReserved = []string{"/workspace", "/.lazaret", "/proc", "/sys", "/dev"}

// decodeProfilePaths decodes profile_paths: guest directories kept per
// profile, across every workspace. An entry is absolute or starts with
// "~/" (the session user's home, resolved when the layers are merged).
func (d *doc) decodeProfilePaths(p pathKey, v any, l *layer, defaults bool) {
	ss, ps := d.strs(p, v)
	seen := map[string]pathKey{}
	for i, s := range ss {
		if msg := checkProfilePathSyntax(s); msg != "" {
			d.valueErrorf(ps[i], "%s", msg)
			continue
		}
		if prev, dup := seen[s]; dup {
			d.valueErrorf(ps[i], "profile_paths: %q is listed twice (also at %s): remove one", s, d.where(prev))
			continue
		}
		seen[s] = ps[i]
		l.profilePaths = append(l.profilePaths, entry[string]{s, ps[i], d.entryWhere(ps[i], defaults)})
	}
}

// checkProfilePathSyntax checks one profile_paths entry as written; ""
// when good. What depends on the session user and the other settings is
// checked by checkProfilePath after the merge.
func checkProfilePathSyntax(s string) string {
	switch {
	case s == "":
		return "profile_paths: an entry is empty: give a guest directory such as \"~/.claude\" or \"/home/agent/.codex\""
	case strings.ContainsAny(s, ",:\\\n\r\t\x00"):
		return fmt.Sprintf("profile_paths: %q contains ',', ':', '\\' or a control character, which a profile path cannot hold: rename the directory", s)
	case len(s) > maxProfilePathLen:
		return fmt.Sprintf("profile_paths: %q is longer than %d bytes: choose a shorter directory", s, maxProfilePathLen)
	case s == "~" || strings.HasPrefix(s, "~/"):
		rest := strings.TrimPrefix(strings.TrimPrefix(s, "~"), "/")
		if rest != "" && path.Clean(rest) != rest || rest == ".." || strings.HasPrefix(rest, "../") {
			return fmt.Sprintf("profile_paths: %q is not a clean path below the home directory: write \"~/%s\" without \"..\", \".\" or doubled slashes", s, strings.TrimPrefix(path.Clean("/"+rest), "/"))
		}
		return ""
	case strings.HasPrefix(s, "~"):
		return fmt.Sprintf("profile_paths: %q names another user's home: write \"~/…\" for the session user's home (the profile's user) or an absolute guest path", s)
	case !strings.HasPrefix(s, "/"):
		return fmt.Sprintf("profile_paths: %q is relative: write an absolute guest path (/home/agent/.claude) or one below the session user's home (~/.claude)", s)
	case strings.Contains("/"+s+"/", "/../"):
		return fmt.Sprintf("profile_paths: %q contains \"..\": write the directory it means, %s", s, path.Clean(s))
	case path.Clean(s) != s:
		return fmt.Sprintf("profile_paths: %q is not clean: write %s", s, path.Clean(s))
	case s == "/":
		return "profile_paths: / is the whole sandbox: name the directory that holds the login state, e.g. \"~/.claude\""
	}
	return ""
}

// expandProfilePath resolves "~" and "~/" against home.
func expandProfilePath(s, home string) string {
	if s == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(s, "~/"); ok {
		return path.Join(home, rest)
	}
	return s
}

// checkProfilePath checks one expanded profile path against the rest of
// the effective profile p; "" when good.
func checkProfilePath(g string, p *Profile) string {
	// Stored as one directory named by the escaped path ('/' → %2F).
	if n := len(g) - 1 + 2*strings.Count(g[1:], "/") + 2*strings.Count(g, "%"); n > 250 {
		return fmt.Sprintf("profile_paths: %s has too many components to be stored (its escaped name would be %d bytes, at most 250): choose a shorter directory", g, n)
	}
	for _, r := range profileReserved {
		if within(g, r) || within(r, g) {
			return fmt.Sprintf("profile_paths: %s overlaps %s, which Lazaret or the kernel provides: choose a directory elsewhere, such as below the home directory (~/.claude)", g, r)
		}
	}
	for _, a := range p.PersistentPaths {
		if within(a, g) {
			what := "is"
			if a != g {
				what = "contains"
			}
			return fmt.Sprintf("profile_paths: %s %s the State Anchor %s of every Domain (a persistent path): a profile path names a directory inside one, such as ~/.claude; remove it or choose a deeper directory", g, what, a)
		}
	}
	for _, h := range []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname"} {
		if within(h, g) {
			return fmt.Sprintf("profile_paths: %s contains %s, which Lazaret provides for each generation: choose another directory", g, h)
		}
	}
	for _, v := range p.Volumes {
		if within(g, v.Target) || within(v.Target, g) {
			return fmt.Sprintf("profile_paths: %s overlaps the volume target %s: a guest path is either a volume or a profile path; remove one", g, v.Target)
		}
	}
	return ""
}

// mergeProfilePaths sets p.ProfilePaths from the layers: the union of
// every layer's entries, "~" resolved against the session user's home,
// each checked against the profile's other mounts, without nesting.
func (d *doc) mergeProfilePaths(p *Profile, layers []*layer) {
	home := p.SessionUser().Home
	got := map[string]entry[string]{}
	layerOf := map[string]int{}
	for li, l := range layers {
		if l == nil {
			continue
		}
		for _, e := range l.profilePaths {
			g := expandProfilePath(e.v, home)
			if prev, dup := got[g]; dup {
				// The same directory from two layers is one entry (lists
				// are unions); twice in one table is a mistake.
				if layerOf[g] == li {
					d.valueErrorf(e.path, "profile %q: profile_paths: %q and %q (%s) are both %s: remove one", p.Name, e.v, prev.v, prev.where, g)
				}
				continue
			}
			if msg := checkProfilePath(g, p); msg != "" {
				d.valueErrorf(e.path, "profile %q: %s", p.Name, msg)
				continue
			}
			got[g], layerOf[g] = e, li
		}
	}
	p.ProfilePaths = []string{}
	for g := range got {
		p.ProfilePaths = append(p.ProfilePaths, g)
	}
	sort.Strings(p.ProfilePaths)
	for i, a := range p.ProfilePaths {
		for _, b := range p.ProfilePaths[i+1:] {
			if within(b, a) {
				d.valueErrorf(got[b].path, "profile %q: profile_paths: %s is inside %s (%s), which already keeps it: remove %s", p.Name, b, a, got[a].where, got[b].v)
			}
		}
	}
	if len(p.ProfilePaths) > MaxProfilePaths {
		var at pathKey
		for _, e := range got {
			at = e.path
			break
		}
		d.valueErrorf(at, "profile %q: profile_paths has %d entries, at most %d are allowed: keep the directories that hold login state and settings", p.Name, len(p.ProfilePaths), MaxProfilePaths)
	}
}
