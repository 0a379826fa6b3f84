package hc

import (
	"encoding/base64"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/hc/network"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// guestEnv is what every guest process of a generation starts from: the
// sandbox's hostname (which the network's /etc files, the sandbox spec and
// the environment share) and the base environment — a standard PATH, the
// Domain's names, the profile's variables and the developer's Git identity
// as command-line-level Git configuration, so that `git commit` works inside
// without touching the host's ~/.gitconfig. Sessions add their own part
// (session). It is fixed once the generation's start has read the host Git
// configuration (sandboxStart), before StartSandbox and any session.
type guestEnv struct {
	hostname string
	base     []string
	// profileEnv is the profile's environment: a variable it sets wins
	// over what a session would set.
	profileEnv map[string]string
}

// newGuestEnv derives the guest environment of workspace ws, profile p
// (named profileName) and Domain id, with the developer's Git identity.
func newGuestEnv(ws, profileName string, id domain.ID, p *config.Profile, gitIdentity []gitSetting) guestEnv {
	hostname := domain.SanitizeHostname(filepath.Base(ws))
	env := []string{
		// lazaret-escalate is found last, at its fixed path.
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + path.Dir(ocispec.InitPath),
		"HOME=/root",
		"USER=root",
		"HOSTNAME=" + hostname,
		"LAZARET=1",
		"LAZARET_PROFILE=" + profileName,
		"LAZARET_DOMAIN_ID=" + string(id),
	}
	// The profile's environment (names Lazaret sets are refused at config
	// check; PATH, HOME and USER may be overridden).
	names := make([]string, 0, len(p.Env))
	for k := range p.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		env = setEnv(env, k, p.Env[k])
	}
	if p.Network.Mode == config.ModeAllowlist {
		// Every guest process finds the egress proxy (sessions add their
		// label); a variable the profile sets wins.
		for k, v := range network.ProxyEnv("") {
			if _, set := p.Env[k]; !set {
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
	return guestEnv{hostname: hostname, base: env, profileEnv: p.Env}
}

// Hostname is the sandbox's hostname.
func (g guestEnv) Hostname() string { return g.hostname }

// Base is the environment of the sandbox's init and the start of every
// session's; callers must not modify it.
func (g guestEnv) Base() []string { return g.base }

// sessionEnv is what one session adds to the base environment.
type sessionEnv struct {
	ID         string // the session's ID
	Capability []byte // its Session Request Capability
	User       config.GuestUser
	// Allowlist: the Domain's network policy is an allowlist, so the
	// session labels its proxied requests.
	Allowlist   bool
	Env         map[string]string // the request's variables
	Credentials map[string]string // env_pass and secrets, checked at admission
}

// session is the environment of one session's command: the base, the
// session user's identity, its proxy label, the request's variables and
// credentials, and the session's ID and capability.
func (g guestEnv) session(s sessionEnv) []string {
	env := append([]string{}, g.base...)
	if !s.User.IsRoot() {
		// The session user's identity, unless the profile sets its own.
		for k, v := range map[string]string{"HOME": s.User.Home, "USER": s.User.Name, "LOGNAME": s.User.Name} {
			if _, set := g.profileEnv[k]; !set {
				env = setEnv(env, k, v)
			}
		}
	}
	if s.Allowlist {
		// The session's label on its proxied requests (denial log, asks).
		for k, v := range network.ProxyEnv(network.SessionLabel(s.ID)) {
			if _, set := g.profileEnv[k]; !set {
				env = setEnv(env, k, v)
			}
		}
	}
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	// The session's credentials (env_pass, secrets), checked against the
	// profile's names at admission; no log line or record holds them.
	for k, v := range s.Credentials {
		env = setEnv(env, k, v)
	}
	// The Session Request Capability travels with guest execution: the
	// escalation client presents it to route requests to this session.
	return append(env, "LAZARET_SESSION_ID="+s.ID, "LAZARET_SESSION_CAPABILITY="+base64.StdEncoding.EncodeToString(s.Capability))
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
