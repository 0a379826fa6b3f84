package hc

import (
	"encoding/base64"
	"path"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

// envMap is env as a map; it fails the test on a name set twice.
func envMap(t *testing.T, env []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("%q is not NAME=value", kv)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("%s set twice in %q", k, env)
		}
		m[k] = v
	}
	return m
}

// TestGuestEnvBase: the base environment carries the Domain's names, the
// sanitized hostname, the profile's variables (which may replace PATH,
// HOME and USER, in place), the egress proxy in allowlist mode unless the
// profile sets the variable, and the Git identity in order.
func TestGuestEnvBase(t *testing.T) {
	id := domain.DeriveID("dev", "/home/me/My Project")
	p := &config.Profile{Name: "dev", Env: map[string]string{"USER": "agent", "EDITOR": "vi", "https_proxy": "http://mine"}}
	p.Network.Mode = config.ModeAllowlist
	g := newGuestEnv("/home/me/My Project", "dev", id, p, []gitSetting{{"user.name", "Ada"}, {"user.email", "ada@example.org"}})
	if g.Hostname() != "lazaret-my-project" {
		t.Errorf("hostname %q, want lazaret-my-project", g.Hostname())
	}
	base := g.Base()
	if want := "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + path.Dir(ocispec.InitPath); base[0] != want {
		t.Errorf("first %q, want %q", base[0], want)
	}
	if base[2] != "USER=agent" {
		t.Errorf("the profile's USER does not replace Lazaret's in place: %q", base)
	}
	m := envMap(t, base)
	for k, want := range map[string]string{
		"HOME": "/root", "HOSTNAME": "lazaret-my-project", "LAZARET": "1", "LAZARET_PROFILE": "dev", "LAZARET_DOMAIN_ID": string(id),
		"EDITOR": "vi", "https_proxy": "http://mine",
		"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "Ada",
		"GIT_CONFIG_KEY_1": "user.email", "GIT_CONFIG_VALUE_1": "ada@example.org",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
	if !strings.HasPrefix(m["HTTPS_PROXY"], "http://") || strings.Contains(m["HTTPS_PROXY"], "@") || m["ALL_PROXY"] == "" {
		t.Errorf("allowlist mode: proxy variables without a label expected, got HTTPS_PROXY=%q ALL_PROXY=%q", m["HTTPS_PROXY"], m["ALL_PROXY"])
	}

	// Deny mode, no identity: no proxy and no Git configuration.
	g = newGuestEnv("/", "dev", id, &config.Profile{Name: "dev"}, nil)
	m = envMap(t, g.Base())
	if g.Hostname() != "lazaret-workspace" {
		t.Errorf("hostname of / is %q, want lazaret-workspace", g.Hostname())
	}
	for _, k := range []string{"HTTP_PROXY", "ALL_PROXY", "GIT_CONFIG_COUNT"} {
		if v, set := m[k]; set {
			t.Errorf("%s=%q set without cause", k, v)
		}
	}
}

// TestGuestEnvSession: a session's environment adds the session user's
// identity (unless the profile sets it), its proxy label in allowlist mode
// (unless the profile sets the variable), the request's variables, its
// credentials (which win) and its ID and capability, without changing the
// base.
func TestGuestEnvSession(t *testing.T) {
	p := &config.Profile{Name: "dev", Env: map[string]string{"HOME": "/work", "http_proxy": "http://mine"}}
	p.Network.Mode = config.ModeAllowlist
	g := newGuestEnv("/ws", "dev", domain.DeriveID("dev", "/ws"), p, nil)
	before := slices.Clone(g.Base())
	capability := []byte{1, 2, 3}
	env := g.session(sessionEnv{ID: "abc", Capability: capability, User: config.GuestUser{Name: "agent", UID: 1000, GID: 1000, Home: "/home/agent"},
		Allowlist: true, Env: map[string]string{"TERM": "xterm"}, Credentials: map[string]string{"TOKEN": "t", "USER": "cred"}})
	if !reflect.DeepEqual(g.Base(), before) {
		t.Fatalf("session changed the base environment:\n%q\n%q", g.Base(), before)
	}
	m := envMap(t, env)
	for k, want := range map[string]string{
		"HOME": "/work", "USER": "cred", "LOGNAME": "agent", "http_proxy": "http://mine", "TERM": "xterm", "TOKEN": "t",
		"LAZARET_SESSION_ID": "abc", "LAZARET_SESSION_CAPABILITY": base64.StdEncoding.EncodeToString(capability),
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
	if !strings.Contains(m["HTTPS_PROXY"], "s-abc:@") {
		t.Errorf("HTTPS_PROXY %q lacks the session's label", m["HTTPS_PROXY"])
	}
	if last := env[len(env)-2:]; !strings.HasPrefix(last[0], "LAZARET_SESSION_ID=") || !strings.HasPrefix(last[1], "LAZARET_SESSION_CAPABILITY=") {
		t.Errorf("the session's ID and capability are not last: %q", last)
	}

	// Root, deny mode: the base identity and no label.
	g = newGuestEnv("/ws", "dev", domain.DeriveID("dev", "/ws"), &config.Profile{Name: "dev"}, nil)
	m = envMap(t, g.session(sessionEnv{ID: "r", User: config.GuestUser{Name: "root", Home: "/root"}}))
	if m["HOME"] != "/root" || m["USER"] != "root" || m["HTTPS_PROXY"] != "" {
		t.Errorf("root session: HOME=%q USER=%q HTTPS_PROXY=%q", m["HOME"], m["USER"], m["HTTPS_PROXY"])
	}
	if _, set := m["LOGNAME"]; set {
		t.Error("root session got LOGNAME")
	}
}
