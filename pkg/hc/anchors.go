package hc

import (
	"path/filepath"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/profilestate"
)

// stateAnchors are the profile's persistent paths as State Anchor binds
// (spec §3.5): RS mounts each overlay at the source in its own namespace.
func (c *coordinator) stateAnchors() ([]ocispec.Anchor, error) {
	dir := ocispec.AnchorSourceDir(c.paths.BundleDir())
	var out []ocispec.Anchor
	for _, p := range c.profile.PersistentPaths {
		name, err := anchor.Name(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ocispec.Anchor{Source: filepath.Join(dir, name), Target: p})
	}
	return out, nil
}

// profilePaths are the profile's profile paths as binds of the profile's
// stored directories (package profilestate), shared by every Domain of the
// profile; RS creates a missing one before runsc starts.
func (c *coordinator) profilePaths() ([]ocispec.ProfilePath, error) {
	var out []ocispec.ProfilePath
	for _, g := range c.profile.ProfilePaths {
		src, err := profilestate.Source(c.paths.StorageRoot, c.profile.Name, g)
		if err != nil {
			return nil, err
		}
		out = append(out, ocispec.ProfilePath{Source: src, Target: g})
	}
	return out, nil
}
