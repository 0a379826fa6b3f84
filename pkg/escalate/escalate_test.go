package escalate

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	r, err := parseArgs([]string{"--why", "fetch deps", "--timeout=90s", "--", "git", "fetch", "--", "-x"})
	if err != nil || r.why != "fetch deps" || r.timeout != 90*time.Second || strings.Join(r.argv, " ") != "git fetch -- -x" {
		t.Errorf("parse: %+v %v", r, err)
	}
	for _, bad := range [][]string{{}, {"git"}, {"--"}, {"--why"}, {"--timeout", "soon", "--", "x"}, {"--", "a\x00b"}, {"--", ""}} {
		if _, err := parseArgs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Outside a Lazaret session the client says so and exits 69; bad usage 64.
func TestRunUnavailableAndUsage(t *testing.T) {
	var errb bytes.Buffer
	o := Options{Env: func(string) string { return "" }, Stderr: &errb, Stdout: &bytes.Buffer{}}
	if code := Run([]string{"--", "true"}, o); code != ExitUnavailable || !strings.Contains(errb.String(), "not inside a Lazaret session") {
		t.Errorf("no capability: %d %q", code, errb.String())
	}
	if code := Run([]string{"true"}, o); code != ExitUsage {
		t.Errorf("usage: %d", code)
	}
	if code := Run([]string{"--help"}, o); code != 0 {
		t.Errorf("help: %d", code)
	}
}
