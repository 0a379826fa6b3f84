package lazaret

import "fmt"

// Config holds the CONSTANTS of Lazaret.tla plus the two numeric
// parameters the module fixes in its text (MaxDomainGeneration == 4 and the
// Init value runtimeFaultsRemaining = 2), which a reduced configuration may
// lower (TLC: "MaxDomainGeneration <- 2" in a .cfg). Model values are
// strings; functions are slices indexed like their domain.
type Config struct {
	Name     string
	Domains  []string
	Sessions []string
	Requests []string
	Commands []string

	SessionDomain               []int // Sessions -> Domains
	SessionFingerprint          []string
	DomainFingerprint           []string
	DomainCoordinatorIdentity   []string
	DomainSidecarIdentity       []string
	DomainSandboxIdentity       []string
	SessionCliIdentity          []string
	SessionAnchorIdentity       []string
	CoordinatorCertificateValid []bool
	SidecarCertificateValid     []bool
	SandboxCertificateValid     []bool
	CliCertificateValid         []bool
	ConfigSafe                  []bool
	SandboxIsolationSafe        []bool
	RequestSession              []int // Requests -> Sessions
	RequestCommand              []int // Requests -> Commands
	RequestSandboxIdentity      []string
	RequestCliIdentity          []string
	RequestSessionAnchor        []string
	RequestCredentialValid      []bool
	RequestSignatureValid       []bool
	ApprovalCliIdentity         []string
	ApprovalSessionAnchor       []string
	ApprovalSignatureValid      []bool
	ApprovalCommand             []int // Requests -> Commands
	AutoRuleMatches             []bool
	CommandRequiresShell        []bool
	CommandContentSafe          []bool

	MaxDomainGeneration int // Lazaret.tla: MaxDomainGeneration == 4
	InitRuntimeFaults   int // Lazaret.tla Init: runtimeFaultsRemaining = 2
}

// Fixture is the configuration of tla/Lazaret.cfg: the *Fixture operators
// of Lazaret.tla.
func Fixture() *Config {
	return &Config{
		Name:                        "Lazaret.cfg",
		Domains:                     []string{"D1"},
		Sessions:                    []string{"S1", "S2"},
		Requests:                    []string{"R1", "R2", "R3"},
		Commands:                    []string{"ExactCmd", "PromptCmd", "ShellCmd", "EditedCmd"},
		SessionDomain:               []int{0, 0},
		SessionFingerprint:          []string{"config-a", "config-a"},
		DomainFingerprint:           []string{"config-a"},
		DomainCoordinatorIdentity:   []string{"coordinator-1"},
		DomainSidecarIdentity:       []string{"sidecar-1"},
		DomainSandboxIdentity:       []string{"sandbox-1"},
		SessionCliIdentity:          []string{"cli-1", "cli-2"},
		SessionAnchorIdentity:       []string{"anchor-1", "anchor-2"},
		CoordinatorCertificateValid: []bool{true},
		SidecarCertificateValid:     []bool{true},
		SandboxCertificateValid:     []bool{true},
		CliCertificateValid:         []bool{true, true},
		ConfigSafe:                  []bool{true},
		SandboxIsolationSafe:        []bool{true},
		RequestSession:              []int{0, 1, 0},
		RequestCommand:              []int{0, 1, 2},
		RequestSandboxIdentity:      []string{"sandbox-1", "sandbox-1", "sandbox-other"},
		RequestCliIdentity:          []string{"cli-1", "cli-2", "cli-1"},
		RequestSessionAnchor:        []string{"anchor-1", "anchor-2", "anchor-1"},
		RequestCredentialValid:      []bool{true, true, true},
		RequestSignatureValid:       []bool{true, true, true},
		ApprovalCliIdentity:         []string{"cli-1", "cli-2", "cli-1"},
		ApprovalSessionAnchor:       []string{"anchor-1", "anchor-2", "anchor-1"},
		ApprovalSignatureValid:      []bool{true, true, true},
		ApprovalCommand:             []int{0, 3, 2},
		AutoRuleMatches:             []bool{true, false, true},
		CommandRequiresShell:        []bool{false, false, true, false},
		CommandContentSafe:          []bool{true, true, true, true},
		MaxDomainGeneration:         4,
		InitRuntimeFaults:           2,
	}
}

// Reduced is the configuration the mutation tests use: the Lazaret.cfg
// fixture with a fault budget of 1 (the Init literal
// runtimeFaultsRemaining = 2 lowered to 1) and MaxDomainGeneration 2 (with
// two sessions at most two generations are reachable, so this bound never
// binds). It keeps every request kind (auto-approved R1, prompted and edited
// R2, and R3 whose sandbox identity does not match) and both sessions.
func Reduced() *Config {
	c := Fixture()
	c.Name = "reduced"
	c.MaxDomainGeneration = 2
	c.InitRuntimeFaults = 1
	return c
}

// Validate checks the ASSUME of Lazaret.tla and the fixed-size limits.
func (c *Config) Validate() error {
	nd, ns, nr, nc := len(c.Domains), len(c.Sessions), len(c.Requests), len(c.Commands)
	switch {
	case nd == 0 || ns == 0 || nr == 0:
		return fmt.Errorf("lazaret: Domains, Sessions and Requests must be non-empty")
	case nd > MaxDomains || ns > MaxSessions || nr > MaxRequests || nc >= None:
		return fmt.Errorf("lazaret: fixture larger than the fixed-size state")
	case c.MaxDomainGeneration < 1 || c.MaxDomainGeneration > 250 || c.InitRuntimeFaults < 0 || c.InitRuntimeFaults > 250:
		return fmt.Errorf("lazaret: numeric parameters out of range")
	}
	lens := map[string][2]int{
		"SessionDomain": {len(c.SessionDomain), ns}, "SessionFingerprint": {len(c.SessionFingerprint), ns},
		"DomainFingerprint": {len(c.DomainFingerprint), nd}, "DomainCoordinatorIdentity": {len(c.DomainCoordinatorIdentity), nd},
		"DomainSidecarIdentity": {len(c.DomainSidecarIdentity), nd}, "DomainSandboxIdentity": {len(c.DomainSandboxIdentity), nd},
		"SessionCliIdentity": {len(c.SessionCliIdentity), ns}, "SessionAnchorIdentity": {len(c.SessionAnchorIdentity), ns},
		"CoordinatorCertificateValid": {len(c.CoordinatorCertificateValid), nd}, "SidecarCertificateValid": {len(c.SidecarCertificateValid), nd},
		"SandboxCertificateValid": {len(c.SandboxCertificateValid), nd}, "CliCertificateValid": {len(c.CliCertificateValid), ns},
		"ConfigSafe": {len(c.ConfigSafe), nd}, "SandboxIsolationSafe": {len(c.SandboxIsolationSafe), nd},
		"RequestSession": {len(c.RequestSession), nr}, "RequestCommand": {len(c.RequestCommand), nr},
		"RequestSandboxIdentity": {len(c.RequestSandboxIdentity), nr}, "RequestCliIdentity": {len(c.RequestCliIdentity), nr},
		"RequestSessionAnchor": {len(c.RequestSessionAnchor), nr}, "RequestCredentialValid": {len(c.RequestCredentialValid), nr},
		"RequestSignatureValid": {len(c.RequestSignatureValid), nr}, "ApprovalCliIdentity": {len(c.ApprovalCliIdentity), nr},
		"ApprovalSessionAnchor": {len(c.ApprovalSessionAnchor), nr}, "ApprovalSignatureValid": {len(c.ApprovalSignatureValid), nr},
		"ApprovalCommand": {len(c.ApprovalCommand), nr}, "AutoRuleMatches": {len(c.AutoRuleMatches), nr},
		"CommandRequiresShell": {len(c.CommandRequiresShell), nc}, "CommandContentSafe": {len(c.CommandContentSafe), nc},
	}
	for name, l := range lens {
		if l[0] != l[1] {
			return fmt.Errorf("lazaret: %s has %d entries, want %d", name, l[0], l[1])
		}
	}
	for _, d := range c.SessionDomain {
		if d < 0 || d >= nd {
			return fmt.Errorf("lazaret: SessionDomain out of range")
		}
	}
	for r := 0; r < nr; r++ {
		if c.RequestSession[r] < 0 || c.RequestSession[r] >= ns || c.RequestCommand[r] < 0 || c.RequestCommand[r] >= nc ||
			c.ApprovalCommand[r] < 0 || c.ApprovalCommand[r] >= nc {
			return fmt.Errorf("lazaret: request %s maps out of range", c.Requests[r])
		}
	}
	return nil
}
