package runverb

import (
	"os"
	"path/filepath"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Profile is the Agent Profile a command runs with: its validated,
// effective settings from the host configuration (package config).
type Profile struct {
	Name string
	// ImageName is the configured image (a built-in name such as "debian",
	// or an oci:/docker:// reference).
	ImageName string
	// Config is the validated profile; its Fingerprint is the
	// Configuration Fingerprint.
	Config *config.Profile
	// ConfigPath is the configuration file read ("" when none: built-ins).
	ConfigPath string
	// Programs is the configuration's [programs] table.
	Programs map[string]string
}

// LookupProfile loads the host configuration from its default location
// ($XDG_CONFIG_HOME/lazaret/config.toml, or the built-in profiles when it
// does not exist) and returns the named profile.
func LookupProfile(name string) (Profile, error) {
	return LookupProfileIn("", name)
}

// LookupProfileIn is LookupProfile with an explicit --config path.
func LookupProfileIn(configPath, name string) (Profile, error) {
	c, err := config.Load(configPath, os.Getenv)
	if err != nil {
		return Profile{}, err
	}
	p, err := c.Profile(name)
	if err != nil {
		return Profile{}, err
	}
	return Profile{Name: p.Name, ImageName: p.Image, Config: p, ConfigPath: c.Path, Programs: c.Programs}, nil
}

// ImagesDir is where `lazaret image build` puts OCI layouts.
func ImagesDir() (string, error) {
	data, err := config.DataHome(os.Getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(data, "lazaret", "images"), nil
}

// ImageRef returns the profile's image reference, checking that a built-in
// image's layout exists.
func (p Profile) ImageRef() (string, error) {
	data, err := config.DataHome(os.Getenv)
	if err != nil {
		return "", err
	}
	ref, layout, builtin := p.Config.ImageRef(data)
	if builtin {
		if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
			return "", errdefs.New(errdefs.ErrInvalid, "the %q image of profile %q is not built (no OCI layout at %s): build it with `lazaret image build %s`", p.ImageName, p.Name, layout, p.ImageName)
		}
	}
	return ref, nil
}
