package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoClientLibraries: the guest init links neither host-side
// packages nor the libraries that make the Escalation Client's start slow
// inside gVisor (protobuf, HTTP, TLS, the egress client); its start is on
// the path of every Domain start and every interactive session.
func TestLinksNoClientLibraries(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"google.golang.org/protobuf", "net/http", "crypto/tls", "github.com/lazaret/lazaret/api",
		"github.com/lazaret/lazaret/pkg/escalate", "github.com/lazaret/lazaret/pkg/egress",
		"github.com/lazaret/lazaret/pkg/hc", "github.com/lazaret/lazaret/pkg/rs", "github.com/lazaret/lazaret/pkg/proc",
		"github.com/lazaret/lazaret/pkg/store", "github.com/lazaret/lazaret/pkg/config",
		"github.com/cockroachdb/pebble", "go.podman.io/",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps printed only %d packages: %q", len(deps), out)
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) {
				t.Errorf("lazaret-init links %s (forbidden %s): keep the guest init's start lean; what the Escalation Client needs belongs in lazaret-escalate", d, f)
			}
		}
	}
}
