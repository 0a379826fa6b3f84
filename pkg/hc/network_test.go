package hc

import (
	"net/netip"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/netpolicy"
)

// TestReadinessFingerprintBindsEveryInput: the network readiness
// fingerprint (FR-18) changes with each of its inputs — Domain ID,
// generation, configuration fingerprint, Network Sidecar ID, policy digest
// and the RS netns identity — so evidence of one generation or namespace can
// never satisfy another.
func TestReadinessFingerprintBindsEveryInput(t *testing.T) {
	cfg, err := config.Parse("", nil, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := cfg.Profile("default")
	tiny, _ := cfg.Profile("tiny")
	pol, _ := netpolicy.Derive(netpolicy.Input{})
	pol2, _ := netpolicy.Derive(netpolicy.Input{Deny: []netpolicy.Rule{{Prefix: netip.MustParsePrefix("198.18.0.0/15"), Source: "t"}}})
	base := func() *coordinator {
		c := &coordinator{generation: 3, profile: def, policy: pol}
		c.paths.ID = domain.DeriveID("default", "/w")
		c.net.sidecarID = "sidecar-a"
		return c
	}
	ns := &lv1.NamespaceIdentity{Dev: 4, Ino: 4026532000}
	want := base().readinessFingerprint(ns)
	if base().readinessFingerprint(ns) != want {
		t.Fatal("fingerprint is not deterministic")
	}
	for name, mut := range map[string]func(c *coordinator, ns **lv1.NamespaceIdentity){
		"domain":     func(c *coordinator, _ **lv1.NamespaceIdentity) { c.paths.ID = domain.DeriveID("default", "/other") },
		"generation": func(c *coordinator, _ **lv1.NamespaceIdentity) { c.generation = 4 },
		"config":     func(c *coordinator, _ **lv1.NamespaceIdentity) { c.profile = tiny },
		"sidecar":    func(c *coordinator, _ **lv1.NamespaceIdentity) { c.net.sidecarID = "sidecar-b" },
		"policy":     func(c *coordinator, _ **lv1.NamespaceIdentity) { c.policy = pol2 },
		"netns ino":  func(_ *coordinator, n **lv1.NamespaceIdentity) { *n = &lv1.NamespaceIdentity{Dev: 4, Ino: 4026532001} },
		"netns dev":  func(_ *coordinator, n **lv1.NamespaceIdentity) { *n = &lv1.NamespaceIdentity{Dev: 5, Ino: 4026532000} },
	} {
		c, n := base(), ns
		mut(c, &n)
		if c.readinessFingerprint(n) == want {
			t.Errorf("changing the %s leaves the readiness fingerprint unchanged", name)
		}
	}
}
