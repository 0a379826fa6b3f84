package trust

import (
	"crypto/ed25519"
	"fmt"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// CredentialClaims bind a protocol-signing public key to an exact
// generation, component role and runtime component ID (spec §2 "Protocol
// Credential").
type CredentialClaims struct {
	Identity    GenerationIdentity `json:"identity"`
	Role        string             `json:"role"`
	ComponentID string             `json:"component_id"`
	PublicKey   []byte             `json:"public_key"`
	// ManifestID is the SHA-256 of the Trust Manifest claims whose issuer
	// signed this credential.
	ManifestID string `json:"manifest_id"`
	IssuedAt   int64  `json:"issued_at"`
}

// Credential is a Protocol Credential: its ID is the SHA-256 of its signed
// claim bytes, so the ID names exactly one credential.
type Credential struct {
	ID     string
	Claims CredentialClaims
	Signed Signed
}

// IssueCredential issues a Protocol Credential for role and component
// (a NewID) over pub, signed by the protocol-issuer key.
func (a *Anchor) IssueCredential(role, componentID string, pub ed25519.PublicKey) (*Credential, error) {
	switch role {
	case RoleSessionCoordinator, RoleAgentSandbox, RoleNetworkSidecar, RoleRuntimeSupervisor:
	default:
		return nil, errdefs.New(errdefs.ErrInvalid, "unknown credential role %q", role)
	}
	if !ValidID(componentID) {
		return nil, errdefs.New(errdefs.ErrInvalid, "bad component ID %q", componentID)
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, errdefs.New(errdefs.ErrInvalid, "credential public key is not Ed25519")
	}
	issuer, err := a.key(&a.issuerKey)
	if err != nil {
		return nil, err
	}
	c := CredentialClaims{
		Identity:    a.id,
		Role:        role,
		ComponentID: componentID,
		PublicKey:   append([]byte(nil), pub...),
		ManifestID:  a.manifestID,
		IssuedAt:    timestamp(a.opts.now()),
	}
	payload := marshal(c)
	s := Signed{Payload: payload, Signatures: map[string][]byte{"issuer": Sign(issuer, RecordProtocolCredential, payload)}}
	return &Credential{ID: digest(payload), Claims: c, Signed: s}, nil
}

// CredentialExpect is what a verifier requires of a credential.
type CredentialExpect struct {
	Identity GenerationIdentity
	Role     string
	// ID, when set, is the credential ID the presenter claimed (e.g. named
	// in a request); it must equal the SHA-256 of the claims.
	ID string
	// ComponentID, when set, is the expected component.
	ComponentID string
}

// VerifyCredential verifies a credential's issuer signature with the
// issuer key of the verified manifest (manifestID its ID) before parsing
// the claims, then checks they name the expected generation, manifest,
// role and IDs.
func VerifyCredential(s Signed, manifest *ManifestClaims, manifestID string, expect CredentialExpect) (*Credential, error) {
	if len(s.Payload) > MaxRecordBytes {
		return nil, errdefs.New(errdefs.ErrRefused, "credential too large")
	}
	if len(s.Signatures) != 1 {
		return nil, errdefs.New(errdefs.ErrRefused, "a credential carries exactly the issuer signature")
	}
	if err := Verify(manifest.IssuerPublicKey, RecordProtocolCredential, s.Payload, s.Signatures["issuer"]); err != nil {
		return nil, errdefs.New(errdefs.ErrRefused, "credential is not signed by this generation's protocol issuer")
	}
	id := digest(s.Payload)
	if expect.ID != "" && expect.ID != id {
		return nil, errdefs.New(errdefs.ErrRefused, "credential ID mismatch: presented %s, the claims digest to %s", expect.ID, id)
	}
	var c CredentialClaims
	if err := strictUnmarshal(s.Payload, &c); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("decode credential: %w", err), errdefs.ErrCorrupt)
	}
	switch {
	case c.Identity != expect.Identity:
		return nil, errdefs.New(errdefs.ErrRefused, "credential is for generation %d of Domain %s, not generation %d of Domain %s", c.Identity.Generation, c.Identity.DomainID, expect.Identity.Generation, expect.Identity.DomainID)
	case c.ManifestID != manifestID:
		return nil, errdefs.New(errdefs.ErrRefused, "credential names another trust manifest")
	case c.Role != expect.Role:
		return nil, errdefs.New(errdefs.ErrRefused, "credential role %q, expected %q", c.Role, expect.Role)
	case expect.ComponentID != "" && c.ComponentID != expect.ComponentID:
		return nil, errdefs.New(errdefs.ErrRefused, "credential is for component %s, expected %s", c.ComponentID, expect.ComponentID)
	case len(c.PublicKey) != ed25519.PublicKeySize:
		return nil, errdefs.New(errdefs.ErrCorrupt, "credential public key is not Ed25519")
	}
	return &Credential{ID: id, Claims: c, Signed: s}, nil
}

// VerifySignedBy checks that sig is cred's key's signature over payload as
// record name (e.g. an escalation request signed by the sandbox).
func (c *Credential) VerifySignedBy(name string, payload, sig []byte) error {
	return Verify(ed25519.PublicKey(c.Claims.PublicKey), name, payload, sig)
}

// SignAsCoordinator signs a record with the Session Coordinator's protocol
// key (held by HC only), for peers that verify it with the coordinator's
// credential.
func (a *Anchor) SignAsCoordinator(name string, payload []byte) ([]byte, error) {
	k, err := a.key(&a.protoKey)
	if err != nil {
		return nil, err
	}
	return Sign(k, name, payload), nil
}
