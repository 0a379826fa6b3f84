package cli

import (
	"os"
	"strings"
	"testing"
)

// TestNetLogEmpty: `lazaret network log` of a Domain
// whose egress proxy never refused anything (no denial log, or an empty
// one) says so instead of printing nothing.
func TestNetLogEmpty(t *testing.T) {
	if os.Geteuid() == 0 {
		asNobody(t, "^TestNetLogEmpty$")
		return
	}
	home, ws := rmEnv(t)
	paths := fakeDomain(t, home, ws)
	for _, what := range []string{"no denial log", "an empty denial log"} {
		code, msg := runCaptured(t, "network", "log", "-C", ws)
		if code != 0 || !strings.Contains(msg, "has refused nothing") || !strings.Contains(msg, string(paths.ID)) {
			t.Errorf("%s: exit %d %q", what, code, msg)
		}
		if err := os.WriteFile(paths.NetworkDenials(), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
