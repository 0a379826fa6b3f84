package hc

import (
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// generationConfig is the Domain's generation configuration: the Domain as
// the CLI named it (workspace, profile, image), the validated Agent Profile
// it sent, this generation's coordinator ID and what init derives from them
// for the guest. init fills it in; from then on it is read only, except
// limits, which the sandbox's start sets (sandboxStart).
type generationConfig struct {
	workspace     string          // the canonical Agent Workspace
	profileName   string          // the Agent Profile's name
	image         string          // the profile's image reference
	frontExe      string          // --front-exe as given (wrapperExecutable checks it)
	gitRouteExe   string          // lazaret-gitroute: the Git-routing daemon and the helper's link
	preparerExe   string          // lazaret-cli: the preparer of a prepared lower (RS's --preparer-exe)
	profile       *config.Profile // the validated Agent Profile
	coordinatorID string          // this coordinator's runtime-unique ID
	guest         guestEnv        // hostname and base environment of guest processes
	// limits are the effective resource limits of the generation (zero
	// until the sandbox's spec is built; read under c.mu by status).
	limits config.Limits
}

// rlimits are the resource limits of every guest process of the
// generation (limits.processes and limits.open_files).
func (g *generationConfig) rlimits() ocispec.Rlimits {
	return ocispec.Rlimits{NProc: g.limits.Processes, NoFile: g.limits.OpenFiles}
}

// volumes are the profile's developer-configured volumes.
func (g *generationConfig) volumes() []ocispec.Volume {
	var out []ocispec.Volume
	for _, v := range g.profile.Volumes {
		out = append(out, ocispec.Volume{Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	return out
}
