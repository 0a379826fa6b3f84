package hc

import (
	"path/filepath"

	"github.com/lazaret/lazaret/pkg/anchor"
	"github.com/lazaret/lazaret/pkg/ocispec"
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
