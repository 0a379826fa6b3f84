package hc

import (
	"crypto/ed25519"
	"strings"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hc/sandbox"
	"github.com/lazaret/lazaret/pkg/trust"
)

// TestStagedOwnershipMustBeSigned: HC refuses a StagedProcessOwnership that
// is unsigned, signed by another key, or altered after signing, before it
// records or acknowledges anything.
func TestStagedOwnershipMustBeSigned(t *testing.T) {
	id := trust.GenerationIdentity{DomainID: string(domain.DeriveID("default", "/p")), Generation: 1, CoordinatorID: randomID(), Profile: "default", ConfigFingerprint: "sha256:" + strings.Repeat("0", 64)}
	a, err := trust.NewAnchor(id, randomID(), trust.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	cred, err := a.IssueCredential(trust.RoleRuntimeSupervisor, randomID(), pub)
	if err != nil {
		t.Fatal(err)
	}
	c := &coordinator{anchor: a, rsCred: cred, generation: 1, coordinator: id.CoordinatorID}
	c.paths.ID = domain.ID(id.DomainID)
	c.sb = sandbox.New(sandbox.Config{Domain: c.paths.ID})
	c.sb.Begin(sandbox.Generation{Number: 1, CoordinatorID: id.CoordinatorID})
	msg := func() *lv1.StagedProcessOwnership {
		return &lv1.StagedProcessOwnership{DomainId: id.DomainID, Generation: 1, CoordinatorId: id.CoordinatorID, Slot: "attached_runsc", Identity: &lv1.PidfsProcessIdentityV1{BootId: make([]byte, 16), PidfsStDev: 5, PidfsStIno: 9, HostPid: 42}}
	}
	sign := func(m *lv1.StagedProcessOwnership, k ed25519.PrivateKey) {
		p, _ := fdpass.SigningPayload(m)
		m.Signature = trust.Sign(k, trust.RecordStagedProcessOwnership, p)
	}
	_, otherKey, _ := ed25519.GenerateKey(nil)
	unsigned := msg()
	foreign := msg()
	sign(foreign, otherKey)
	altered := msg()
	sign(altered, key)
	altered.Identity.PidfsStIno++
	for name, m := range map[string]*lv1.StagedProcessOwnership{"unsigned": unsigned, "foreign key": foreign, "altered": altered} {
		if err := c.commitStaged(m); err == nil || !strings.Contains(err.Error(), "not signed") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A correctly signed message passes the signature check (and is then
	// refused for naming another boot, before any side effect).
	good := msg()
	sign(good, key)
	if err := c.commitStaged(good); err == nil || strings.Contains(err.Error(), "not signed") {
		t.Errorf("signed message: %v", err)
	}
}
