package rs

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/gitroute"
)

// TestReadDaemonLines: RS hears the Git-routing daemon's mount, then its
// ignore rules, from its stdout: complete, refused with the daemon's
// reason (the start is then refused, naming it), or never (the daemon
// ended first); a rules line before the mount's does not count.
func TestReadDaemonLines(t *testing.T) {
	for _, c := range []struct {
		name         string
		out          string
		mounted      bool
		rulesErr     error
		rulesReasons []string
	}{
		{"complete", gitroute.ReadyLine + "\n" + gitroute.RulesLine + "\nlater noise\n", true, nil, nil},
		{"refused", gitroute.ReadyLine + "\n" + gitroute.RulesErrorPrefix + "read ignore rules of /ws: /ws/big/.gitignore is larger than 4194304 bytes\n", true,
			errdefs.ErrInvalid, []string{"cannot read the workspace's ignore rules", "big/.gitignore is larger", "fix or remove the file it names"}},
		{"ended after the mount", gitroute.ReadyLine + "\n", true, errdefs.ErrUnavailable, []string{"exited before reading the workspace's ignore rules"}},
		{"ended before the mount", gitroute.RulesLine + "\n", false, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ready, rules := make(chan error, 1), make(chan error, 1)
			done := make(chan struct{})
			go func() { defer close(done); readDaemonLines(strings.NewReader(c.out), ready, rules) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("readDaemonLines did not return at the output's end")
			}
			mountErr := <-ready
			if (mountErr == nil) != c.mounted {
				t.Fatalf("mount outcome %v, want mounted %v", mountErr, c.mounted)
			}
			if !c.mounted {
				if len(rules) != 0 {
					t.Error("a rules outcome without a mount")
				}
				return
			}
			err := <-rules
			if c.rulesErr == nil {
				if err != nil {
					t.Fatalf("rules: %v", err)
				}
				return
			}
			if !errors.Is(err, c.rulesErr) {
				t.Fatalf("rules: %v, want %v", err, c.rulesErr)
			}
			for _, w := range c.rulesReasons {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("rules error %q lacks %q", err, w)
				}
			}
		})
	}
}
