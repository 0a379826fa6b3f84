package runverb

import (
	"os"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/locate"
)

// ProgramGetenv is getenv with the host configuration's [programs] table
// behind it: locate.Find consults LAZARET_<NAME> first, so an environment
// override wins over the configuration, which wins over the executable's
// neighbours, PREFIX/libexec/lazaret and PATH.
func ProgramGetenv(programs map[string]string, getenv func(string) string) func(string) string {
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		for name, path := range programs {
			if locate.EnvVar(name) == k {
				return path
			}
		}
		return ""
	}
}

// ProgramEnv hands configured program paths to the Host Coordinator (which
// never reads the configuration file) as LAZARET_<NAME>, unless the
// environment already overrides them.
func ProgramEnv(programs map[string]string, getenv func(string) string) []string {
	var env []string
	for _, name := range config.ProgramNames {
		if path := programs[name]; path != "" && getenv(locate.EnvVar(name)) == "" {
			env = append(env, locate.EnvVar(name)+"="+path)
		}
	}
	return env
}

// ConfiguredPrograms loads the default configuration's [programs] (nil, with
// the error, when the configuration is invalid).
func ConfiguredPrograms() (map[string]string, error) {
	c, err := config.Load("", os.Getenv)
	if err != nil {
		return nil, err
	}
	return c.Programs, nil
}
