package main

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/linkcheck"
)

// TestLinksNoClientLibraries: the guest init links neither host-side
// packages nor the libraries that make the Escalation Client's start slow
// inside gVisor (protobuf, HTTP, TLS, the egress client); its start is on
// the path of every Domain start and every interactive session.
func TestLinksNoClientLibraries(t *testing.T) {
	forbidden := []string{
		"google.golang.org/protobuf", "net/http", "crypto/tls", "github.com/lazaret/lazaret/api",
		"github.com/lazaret/lazaret/pkg/escalate", "github.com/lazaret/lazaret/pkg/egress",
		"github.com/lazaret/lazaret/pkg/hc", "github.com/lazaret/lazaret/pkg/rs", "github.com/lazaret/lazaret/pkg/proc",
		"github.com/lazaret/lazaret/pkg/store", "github.com/lazaret/lazaret/pkg/config",
		"github.com/cockroachdb/pebble", "go.podman.io/",
	}
	for _, v := range linkcheck.Forbidden(t, ".", forbidden) {
		t.Errorf("lazaret-init links %s (forbidden %s): keep the guest init's start lean; what the Escalation Client needs belongs in lazaret-escalate", v.Dep, v.Rule)
	}
}
