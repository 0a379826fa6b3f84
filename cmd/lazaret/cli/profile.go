package cli

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// profile is an Agent Profile. Until the configuration issue brings the TOML
// host configuration, Lazaret has two built-in profiles.
type profile struct {
	Name string
	// ImageName is the locally built image (lazaret image build NAME).
	ImageName string
}

var builtinProfiles = map[string]profile{
	"default": {Name: "default", ImageName: "debian"},
	"tiny":    {Name: "tiny", ImageName: "busybox"},
}

func lookupProfile(name string) (profile, error) {
	p, ok := builtinProfiles[name]
	if !ok {
		var names []string
		for n := range builtinProfiles {
			names = append(names, n)
		}
		sort.Strings(names)
		return p, errdefs.New(errdefs.ErrInvalid, "unknown profile %q: the available profiles are %s", name, strings.Join(names, ", "))
	}
	return p, nil
}

// imagesDir is where `lazaret image build` puts OCI layouts.
func imagesDir() (string, error) {
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" {
		home := os.Getenv("HOME")
		if home == "" {
			return "", errdefs.New(errdefs.ErrInvalid, "neither XDG_DATA_HOME nor HOME is set: set HOME")
		}
		data = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(data, "lazaret", "images"), nil
}

// imageRef returns the profile's image reference, checking the layout exists.
func (p profile) imageRef() (string, error) {
	dir, err := imagesDir()
	if err != nil {
		return "", err
	}
	layout := filepath.Join(dir, p.ImageName)
	if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
		return "", errdefs.New(errdefs.ErrInvalid, "the %q image of profile %q is not built (no OCI layout at %s): build it with `lazaret image build %s`", p.ImageName, p.Name, layout, p.ImageName)
	}
	return "oci:" + layout + ":latest", nil
}
