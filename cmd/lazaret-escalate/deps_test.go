package main

import (
	"testing"

	"github.com/lazaret/lazaret/pkg/linkcheck"
)

// TestLinksNothingHostSide: the in-sandbox binary links no host-side
// package (coordinator, supervisor, broker, store, mailbox handles,
// configuration) and no host-only library.
func TestLinksNothingHostSide(t *testing.T) {
	forbidden := []string{
		"github.com/lazaret/lazaret/pkg/hc", "github.com/lazaret/lazaret/pkg/rs", "github.com/lazaret/lazaret/pkg/proc",
		"github.com/lazaret/lazaret/pkg/pidfs", "github.com/lazaret/lazaret/pkg/store", "github.com/lazaret/lazaret/pkg/mailbox",
		"github.com/lazaret/lazaret/pkg/config", "github.com/lazaret/lazaret/pkg/audit", "github.com/lazaret/lazaret/pkg/participant",
		"github.com/lazaret/lazaret/pkg/catalog", "github.com/lazaret/lazaret/pkg/prepare", "github.com/lazaret/lazaret/pkg/netsetup",
		"github.com/cockroachdb/pebble", "github.com/vishvananda/netlink", "go.podman.io/",
	}
	for _, v := range linkcheck.Forbidden(t, ".", forbidden) {
		t.Errorf("lazaret-escalate links host-side package %s (forbidden %s): move what the client needs into pkg/escalate", v.Dep, v.Rule)
	}
}
