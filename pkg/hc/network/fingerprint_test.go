package network

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
	type inputs struct {
		id     domain.ID
		gen    uint64
		prof   *config.Profile
		sc     string
		policy netpolicy.Policy
		ns     *lv1.NamespaceIdentity
	}
	base := func() inputs {
		return inputs{domain.DeriveID("default", "/w"), 3, def, "sidecar-a", pol, &lv1.NamespaceIdentity{Dev: 4, Ino: 4026532000}}
	}
	fp := func(in inputs) [32]byte {
		return ReadinessFingerprint(in.id, in.gen, in.prof.Fingerprint(), in.sc, in.policy.Digest(), in.ns)
	}
	want := fp(base())
	if fp(base()) != want {
		t.Fatal("fingerprint is not deterministic")
	}
	for name, mut := range map[string]func(in *inputs){
		"domain":     func(in *inputs) { in.id = domain.DeriveID("default", "/other") },
		"generation": func(in *inputs) { in.gen = 4 },
		"config":     func(in *inputs) { in.prof = tiny },
		"sidecar":    func(in *inputs) { in.sc = "sidecar-b" },
		"policy":     func(in *inputs) { in.policy = pol2 },
		"netns ino":  func(in *inputs) { in.ns = &lv1.NamespaceIdentity{Dev: 4, Ino: 4026532001} },
		"netns dev":  func(in *inputs) { in.ns = &lv1.NamespaceIdentity{Dev: 5, Ino: 4026532000} },
	} {
		in := base()
		mut(&in)
		if fp(in) == want {
			t.Errorf("changing the %s leaves the readiness fingerprint unchanged", name)
		}
	}
}
