package main

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/linkcheck"
)

// TestLinksOnlyItsRoles: the Git-routing daemon, the connectivity
// helper's link and the brokers' spawn wrappers start on every cold
// start's critical path; this binary links neither the CLI, the protocol
// nor the stores, whose package initialisation they do not need (pkg/proc,
// the wrapper role, links only small primitives).
func TestLinksOnlyItsRoles(t *testing.T) {
	forbidden := []string{
		"google.golang.org/protobuf", "net/http", "crypto/tls", "github.com/lazaret/lazaret/api",
		"github.com/urfave/cli", "github.com/lazaret/lazaret/pkg/client", "github.com/lazaret/lazaret/pkg/control",
		"github.com/lazaret/lazaret/pkg/hc", "github.com/lazaret/lazaret/pkg/rs",
		"github.com/lazaret/lazaret/pkg/store", "github.com/lazaret/lazaret/pkg/catalog", "github.com/lazaret/lazaret/pkg/config",
		"github.com/cockroachdb/pebble", "go.podman.io/",
	}
	for _, v := range linkcheck.Forbidden(t, ".", forbidden) {
		t.Errorf("lazaret-gitroute links %s (forbidden %s): keep the roles' start lean; what else a role needs belongs in its own package", v.Dep, v.Rule)
	}
}
