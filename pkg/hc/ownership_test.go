package hc

import (
	"crypto/ed25519"
	"strings"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/hc/sandbox"
	"github.com/lazaret/lazaret/pkg/hc/supervisor"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
)

// TestStagedOwnershipMustBeSigned: HC refuses a StagedProcessOwnership that
// is not signed by this generation's RS credential before it records or
// acknowledges anything. Here RS holds no credential of this generation
// (a supervisor the coordinator did not launch), so even a message signed
// by some key is refused as unsigned, for every slot, and the sandbox role
// records nothing. The signature check itself (unsigned, another key,
// altered) is tested with a real credential in package supervisor.
func TestStagedOwnershipMustBeSigned(t *testing.T) {
	id := domain.DeriveID("default", "/p")
	coord := randomID()
	rs := supervisortest.New(t)
	c := &coordinator{rs: supervisor.OverChannel(rs.HC), generation: 1, cfg: generationConfig{coordinatorID: coord}}
	c.paths.ID = id
	c.sb = sandbox.New(sandbox.Config{Domain: c.paths.ID})
	c.sb.Begin(sandbox.Generation{Number: 1, CoordinatorID: coord})
	_, key, _ := ed25519.GenerateKey(nil)
	for _, slot := range []string{"attached_runsc", "git_routing", "egress_proxy"} {
		m, err := supervisortest.Sign(key, &lv1.StagedProcessOwnership{DomainId: string(id), Generation: 1, CoordinatorId: coord, Slot: slot,
			Identity: &lv1.PidfsProcessIdentityV1{BootId: make([]byte, 16), PidfsStDev: 5, PidfsStIno: 9, HostPid: 42}})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.commitStaged(m); err == nil || !strings.Contains(err.Error(), "not signed") {
			t.Errorf("%s: %v", slot, err)
		}
	}
	if c.sb.StagedRunsc() != nil {
		t.Error("the sandbox role recorded a staged runsc from an unverified message")
	}
}
