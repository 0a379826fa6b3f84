package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Mount is a host path bind-mounted into the sandbox.
type Mount struct {
	// Source is the host path; Confine returns it canonical.
	Source string `json:"source"`
	// Target is the guest path.
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
	// Name says what the mount is in messages ("workspace", "volume", …).
	Name string `json:"name"`
}

// Confinement is the verified configuration confinement of one Domain
// generation (spec §1.1): the canonical configuration file, every path
// whose change would redirect it, and the canonical mount sources.
type Confinement struct {
	// ConfigPath is the canonical configuration file ("" when none).
	ConfigPath string
	// ConfigChain is every host path that names the configuration: the
	// canonical path and each symbolic link followed to reach it.
	ConfigChain []string
	Mounts      []Mount
}

// Mounts returns the bind mounts a profile asks for with workspace mounted
// read-write at /workspace.
func (p *Profile) Mounts(workspace string) []Mount {
	ms := []Mount{{Source: workspace, Target: "/workspace", Name: "workspace"}}
	for _, v := range p.Volumes {
		ms = append(ms, Mount{Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly, Name: "volume " + v.Target})
	}
	return ms
}

// Confine canonicalizes the configuration file (configPath, "" for none)
// and every mount source, and refuses when the configuration would be
// visible in the sandbox: the file, or any symbolic link on the way to it,
// is a mount source, inside one, or above one; or it has other hard links
// (one could sit in a mounted tree). The returned Mounts have canonical
// sources and are what the sandbox specification may bind. Every mount
// source must exist.
func Confine(configPath string, mounts []Mount) (*Confinement, error) {
	c := &Confinement{}
	if configPath != "" {
		canon, chain, err := resolveChain(configPath)
		if err != nil {
			return nil, errdefs.Mark(fmt.Errorf("resolve configuration path %s: %w", configPath, err), errdefs.ErrInvalid)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(canon, &st); err != nil {
			return nil, errdefs.Mark(fmt.Errorf("stat configuration %s: %w", canon, err), errdefs.ErrInvalid)
		}
		if st.Nlink > 1 {
			return nil, errdefs.New(errdefs.ErrRefused, "configuration %s has %d hard links: another link could be inside a path mounted into the sandbox; keep one link (copy the file to a new one and remove the others)", canon, st.Nlink)
		}
		c.ConfigPath = canon
		c.ConfigChain = chain
	}
	for _, m := range mounts {
		src, err := filepath.EvalSymlinks(m.Source)
		if err != nil {
			return nil, errdefs.Mark(fmt.Errorf("%s source %s: %w: create it or fix the path", m.Name, m.Source, err), errdefs.ErrInvalid)
		}
		if !filepath.IsAbs(src) {
			if src, err = filepath.Abs(src); err != nil {
				return nil, err
			}
		}
		m.Source = src
		if err := c.Allows(m.Name, src); err != nil {
			return nil, err
		}
		c.Mounts = append(c.Mounts, m)
	}
	return c, nil
}

// Allows checks one more canonical bind-mount source (e.g. Lazaret's own
// control or credential directory) against the configuration: the Host
// Coordinator calls it for every source of the final sandbox
// specification, so configuration bytes are never part of a mount.
func (c *Confinement) Allows(name, canonicalSource string) error {
	for _, cp := range c.ConfigChain {
		switch {
		case cp == canonicalSource:
			return refuseConfinement(name, canonicalSource, cp, c.ConfigPath, "is")
		case under(cp, canonicalSource):
			return refuseConfinement(name, canonicalSource, cp, c.ConfigPath, "is inside")
		case under(canonicalSource, cp):
			return refuseConfinement(name, canonicalSource, cp, c.ConfigPath, "is an ancestor of")
		}
	}
	return nil
}

func refuseConfinement(name, src, cp, config, rel string) error {
	what := "the configuration file " + cp
	if cp != config {
		what = fmt.Sprintf("%s (a symbolic link on the way to the configuration file %s)", cp, config)
	}
	return errdefs.New(errdefs.ErrRefused, "%s %s the %s source %s, which is mounted into the sandbox: the sandbox could read or rewrite its own trusted configuration (spec §1.1); move the configuration out of %s (e.g. to ~/.config/lazaret/config.toml) or mount a different directory", what, rel, name, src, src)
}

// under reports whether p is strictly below dir.
func under(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}

// resolveChain resolves p like filepath.EvalSymlinks and also returns the
// absolute path of every symbolic link it followed, plus the result: each
// of them, if writable from the sandbox, would let it substitute the file.
func resolveChain(p string) (string, []string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", nil, err
	}
	var chain []string
	resolved := "/"
	rest := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	for links := 0; len(rest) > 0; {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			resolved = next
			continue
		}
		links++
		if links > 255 {
			return "", nil, fmt.Errorf("too many symbolic links")
		}
		chain = append(chain, next)
		target, err := os.Readlink(next)
		if err != nil {
			return "", nil, err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return resolved, append(chain, resolved), nil
}
