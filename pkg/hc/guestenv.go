package hc

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/hc/network"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// guestEnv is the environment of every guest process: a standard PATH, and
// the developer's Git identity as command-line-level Git configuration so
// that `git commit` works inside without touching the host's ~/.gitconfig.
func (c *coordinator) guestEnv(gitIdentity []gitSetting) []string {
	env := []string{
		// lazaret-escalate is found last, at its fixed path.
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + path.Dir(ocispec.InitPath),
		"HOME=/root",
		"USER=root",
		"HOSTNAME=" + c.hostname,
		"LAZARET=1",
		"LAZARET_PROFILE=" + c.prof,
		"LAZARET_DOMAIN_ID=" + string(c.paths.ID),
	}
	// The profile's environment (names Lazaret sets are refused at config
	// check; PATH, HOME and USER may be overridden).
	names := make([]string, 0, len(c.profile.Env))
	for k := range c.profile.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		env = setEnv(env, k, c.profile.Env[k])
	}
	if c.profile.Network.Mode == config.ModeAllowlist {
		// Every guest process finds the egress proxy (sessions add their
		// label); a variable the profile sets wins.
		for k, v := range network.ProxyEnv("") {
			if _, set := c.profile.Env[k]; !set {
				env = setEnv(env, k, v)
			}
		}
	}
	if len(gitIdentity) > 0 {
		env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(gitIdentity)))
		for i, g := range gitIdentity {
			env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, g.key), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, g.value))
		}
	}
	return env
}

// setEnv sets k=v in env, replacing an existing k.
func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, k+"=") {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

// volumes are the profile's developer-configured volumes.
func (c *coordinator) volumes() []ocispec.Volume {
	var out []ocispec.Volume
	for _, v := range c.profile.Volumes {
		out = append(out, ocispec.Volume{Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly})
	}
	return out
}
