package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestEnvPassAndSecrets(t *testing.T) {
	c := mustParse(t, `
[defaults]
env_pass = ["ANTHROPIC_API_KEY"]
[profiles.a]
env_pass = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"]
secrets.GH_TOKEN = { command = ["pass", "show", "gh"] }
secrets.NPM_TOKEN = { env = "MY_NPM_TOKEN" }
`)
	p, _ := c.Profile("a")
	if want := []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}; !reflect.DeepEqual(p.EnvPass, want) {
		t.Fatalf("env_pass = %v, want %v", p.EnvPass, want)
	}
	if want := (map[string]Secret{"GH_TOKEN": {Command: []string{"pass", "show", "gh"}}, "NPM_TOKEN": {Env: "MY_NPM_TOKEN"}}); !reflect.DeepEqual(p.Secrets, want) {
		t.Fatalf("secrets = %v, want %v", p.Secrets, want)
	}
	if want := []string{"ANTHROPIC_API_KEY", "GH_TOKEN", "NPM_TOKEN", "OPENAI_API_KEY"}; !reflect.DeepEqual(p.SecretNames(), want) {
		t.Fatalf("SecretNames = %v", p.SecretNames())
	}
	// Names and sources are fingerprinted; a round trip keeps them.
	q, err := FromCanonical(p.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	if q.Fingerprint() != p.Fingerprint() || !reflect.DeepEqual(q.Secrets, p.Secrets) {
		t.Fatalf("round trip changed the profile: %s", q.Canonical())
	}
	b, _ := c.Profile("default")
	if !reflect.DeepEqual(b.EnvPass, []string{"ANTHROPIC_API_KEY"}) {
		t.Fatalf("[defaults] env_pass not applied to built-ins: %v", b.EnvPass)
	}
	d := Diff(b, p)
	if !strings.Contains(strings.Join(d, "\n"), "secrets: added GH_TOKEN") {
		t.Fatalf("diff %q", d)
	}
}

func TestCredentialsWithoutSecretsKeepFingerprint(t *testing.T) {
	p, _ := Builtin().Profile("default")
	if strings.Contains(string(p.Canonical()), "env_pass") || strings.Contains(string(p.Canonical()), "ports") {
		t.Fatalf("empty credential keys in canonical encoding: %s", p.Canonical())
	}
}

func TestCredentialErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`[profiles.a]
env_pass = ["1BAD"]`, "not an environment variable name"},
		{`[profiles.a]
env_pass = ["TERM"]`, "passed from your terminal"},
		{`[profiles.a]
env_pass = ["X", "X"]`, "listed twice"},
		{`[profiles.a]
env_pass = ["X"]
env = { X = "1" }`, "both in env_pass"},
		{`[profiles.a]
env_pass = ["X"]
secrets.X = { env = "Y" }`, "both in env_pass"},
		{`[profiles.a]
secrets.X = { env = "Y", command = ["pass"] }`, "exactly one of"},
		{`[profiles.a]
secrets.X = {}`, "exactly one of"},
		{`[profiles.a]
secrets.X = { command = [] }`, "the command is empty"},
		{`[profiles.a]
secrets.X = "literal"`, "a secret is a table"},
		{`[profiles.a]
secrets.X = { file = "/x" }`, "unknown key"},
		{`[profiles.a]
secrets.LAZARET_X = { env = "Y" }`, "set by Lazaret"},
	} {
		_, err := parse(t, tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: err = %v, want %q", tc.src, err, tc.want)
		}
	}
}

func TestPorts(t *testing.T) {
	c := mustParse(t, `
[profiles.a]
ports = ["5173", "127.0.0.1:8080:80", "9000:90", "0.0.0.0:3000:3000"]
`)
	p, _ := c.Profile("a")
	var got []string
	for _, pt := range p.Ports {
		got = append(got, pt.String())
	}
	want := []string{"0.0.0.0:3000:3000", "127.0.0.1:5173:5173", "127.0.0.1:8080:80", "127.0.0.1:9000:90"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ports = %v, want %v", got, want)
	}
	q, err := FromCanonical(p.Canonical())
	if err != nil || !reflect.DeepEqual(q.Ports, p.Ports) {
		t.Fatalf("round trip: %v %v", q, err)
	}
	for _, tc := range []struct{ src, want string }{
		{`ports = ["0"]`, "from 1 to 65535"},
		{`ports = ["70000"]`, "from 1 to 65535"},
		{`ports = ["a:b:c:d"]`, "write PORT"},
		{`ports = ["::1:80:80"]`, "write PORT"},
		{`ports = ["localhost:80:80"]`, "not an IPv4 host address"},
		{`ports = ["8080:80", "8080:81"]`, "forwarded twice"},
		{`ports = [8080]`, "must be a string"},
	} {
		_, err := parse(t, "[profiles.a]\n"+tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.src, err, tc.want)
		}
	}
}

func TestParsePortCommandLineIsLoopbackOnly(t *testing.T) {
	if p, err := ParsePort("5173"); err != nil || p.String() != "127.0.0.1:5173:5173" {
		t.Fatalf("5173: %v %v", p, err)
	}
	if p, err := ParsePort("127.0.0.2:8080:80"); err != nil || p.String() != "127.0.0.2:8080:80" {
		t.Fatalf("127.0.0.2: %v %v", p, err)
	}
	for _, s := range []string{"0.0.0.0:80:80", "192.168.1.2:80:80"} {
		if _, err := ParsePort(s); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("%s: %v", s, err)
		}
	}
}
