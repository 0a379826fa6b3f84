package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNothingHostSide: the in-sandbox binary links no host-side
// package (coordinator, supervisor, broker, store, mailbox handles,
// configuration) and no host-only library.
func TestLinksNothingHostSide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/lazaret/lazaret/pkg/hc", "github.com/lazaret/lazaret/pkg/rs", "github.com/lazaret/lazaret/pkg/proc",
		"github.com/lazaret/lazaret/pkg/pidfs", "github.com/lazaret/lazaret/pkg/store", "github.com/lazaret/lazaret/pkg/mailbox",
		"github.com/lazaret/lazaret/pkg/config", "github.com/lazaret/lazaret/pkg/audit", "github.com/lazaret/lazaret/pkg/participant",
		"github.com/lazaret/lazaret/pkg/catalog", "github.com/lazaret/lazaret/pkg/prepare", "github.com/lazaret/lazaret/pkg/netsetup",
		"github.com/cockroachdb/pebble", "github.com/vishvananda/netlink", "go.podman.io/",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed only %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
				t.Errorf("lazaret-escalate links host-side package %s (forbidden %s): move what the client needs into pkg/escalate", d, f)
			}
		}
	}
}
