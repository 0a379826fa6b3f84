package secretenv

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/errdefs"
)

func profile(t *testing.T, src string) *config.Profile {
	t.Helper()
	c, err := config.Parse("/c.toml", []byte(src), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Profile("a")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const src = `[profiles.a]
env_pass = ["API_KEY"]
secrets.TOKEN = { command = ["pass", "show", "token"] }
secrets.OTHER = { env = "HOST_OTHER" }
`

func TestResolve(t *testing.T) {
	p := profile(t, src)
	env := map[string]string{"API_KEY": "k-123", "HOST_OTHER": "o-456"}
	var ran []string
	got, err := Resolve(context.Background(), p, func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		func(_ context.Context, argv []string, limit int64) ([]byte, error) {
			ran = argv
			return []byte("t-789\n"), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"API_KEY": "k-123", "TOKEN": "t-789", "OTHER": "o-456"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if !reflect.DeepEqual(ran, []string{"pass", "show", "token"}) {
		t.Fatalf("ran %v", ran)
	}
	if err := Check(p, got); err != nil {
		t.Fatal(err)
	}
	extra := map[string]string{"EVIL": "x"}
	for k, v := range got {
		extra[k] = v
	}
	if err := Check(p, extra); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("extra name: %v", err)
	}
	delete(got, "TOKEN")
	if err := Check(p, got); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("missing name: %v", err)
	}
}

func TestResolveMissingNamesEveryProblemNeverAValue(t *testing.T) {
	p := profile(t, src)
	_, err := Resolve(context.Background(), p, func(string) (string, bool) { return "", false },
		func(context.Context, []string, int64) ([]byte, error) {
			return []byte("leaked-output"), errors.New("exit status 1")
		})
	if !errors.Is(err, ErrMissing) || !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"API_KEY (env_pass) is not set", "HOST_OTHER, which is not set", `secret TOKEN: the command { command = ["pass", "show", "token"] } failed (exit status 1)`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "leaked-output") {
		t.Fatalf("message shows command output: %s", msg)
	}
}

func TestResolveRefusesEmptyOutputAndNUL(t *testing.T) {
	p := profile(t, `[profiles.a]
secrets.TOKEN = { command = ["x"] }
env_pass = ["K"]`)
	_, err := Resolve(context.Background(), p, func(string) (string, bool) { return "a\x00b", true },
		func(context.Context, []string, int64) ([]byte, error) { return []byte("\n"), nil })
	if err == nil || !strings.Contains(err.Error(), "printed nothing") || !strings.Contains(err.Error(), "NUL byte") {
		t.Fatalf("err = %v", err)
	}
}
