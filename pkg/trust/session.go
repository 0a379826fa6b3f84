package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func randReader() io.Reader { return rand.Reader }

// SessionAnchor is a Client Session's ephemeral signing key, held only in
// the CLI's memory. Its registration binds the random Session ID, the
// Client CLI ID and the generation to its public key.
type SessionAnchor struct {
	SessionID string
	key       ed25519.PrivateKey
}

// NewSessionAnchor creates a Session Anchor with a new random Session ID.
func NewSessionAnchor(r io.Reader) (*SessionAnchor, error) {
	if r == nil {
		r = rand.Reader
	}
	id, err := NewID(r)
	if err != nil {
		return nil, err
	}
	_, key, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, err
	}
	return &SessionAnchor{SessionID: id, key: key}, nil
}

// Public returns the anchor's public key.
func (s *SessionAnchor) Public() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Sign signs a developer decision (or any record) as record name.
func (s *SessionAnchor) Sign(name string, payload []byte) []byte { return Sign(s.key, name, payload) }

// RegistrationClaims are a session's self-signed registration.
type RegistrationClaims struct {
	Identity        GenerationIdentity `json:"identity"`
	SessionID       string             `json:"session_id"`
	ClientID        string             `json:"client_id"`
	AnchorPublicKey []byte             `json:"anchor_public_key"`
}

// Registration returns the registration record, signed by the anchor (proof
// that the CLI holds the key the Session ID is bound to).
func (s *SessionAnchor) Registration(gen GenerationIdentity, clientID string) Signed {
	payload := marshal(RegistrationClaims{Identity: gen, SessionID: s.SessionID, ClientID: clientID, AnchorPublicKey: s.Public()})
	return Signed{Payload: payload, Signatures: map[string][]byte{"anchor": s.Sign(RecordSessionRegistration, payload)}}
}

// CapabilityClaims are a Session Request Capability: the binding of one
// live Client Session to the exact generation and its protocol credentials.
type CapabilityClaims struct {
	Identity        GenerationIdentity `json:"identity"`
	SessionID       string             `json:"session_id"`
	ClientID        string             `json:"client_id"`
	AnchorPublicKey []byte             `json:"anchor_public_key"`
	// SandboxCredentialID and CoordinatorCredentialID are the credential
	// IDs of this generation the session's requests are routed under.
	SandboxCredentialID     string `json:"sandbox_credential_id"`
	CoordinatorCredentialID string `json:"coordinator_credential_id"`
	IssuedAt                int64  `json:"issued_at"`
}

// IssueSessionCapability verifies a registration presented on an mTLS
// connection authenticated as client (VerifyClient): the anchor signature
// over its exact bytes, then that it names this generation and that
// client; and returns the Session Request Capability signed with the
// coordinator's protocol key.
func (a *Anchor) IssueSessionCapability(reg Signed, client *ClientIdentity) (Signed, *CapabilityClaims, error) {
	var c RegistrationClaims
	if len(reg.Payload) > MaxRecordBytes || len(reg.Signatures) != 1 {
		return Signed{}, nil, errdefs.New(errdefs.ErrRefused, "malformed session registration")
	}
	if err := strictUnmarshal(reg.Payload, &c); err != nil {
		return Signed{}, nil, errdefs.Mark(fmt.Errorf("decode session registration: %w", err), errdefs.ErrCorrupt)
	}
	// The key is inside the claims (self-certifying): verify before use.
	if err := Verify(c.AnchorPublicKey, RecordSessionRegistration, reg.Payload, reg.Signatures["anchor"]); err != nil {
		return Signed{}, nil, errdefs.New(errdefs.ErrRefused, "session registration is not signed by its Session Anchor")
	}
	switch {
	case c.Identity != a.id:
		return Signed{}, nil, errdefs.New(errdefs.ErrRefused, "session registration is for generation %d of Domain %s, not this generation %d", c.Identity.Generation, c.Identity.DomainID, a.id.Generation)
	case client == nil || c.ClientID != client.ClientID:
		return Signed{}, nil, errdefs.New(errdefs.ErrRefused, "session registration names another Client CLI than the authenticated connection")
	case !ValidID(c.SessionID):
		return Signed{}, nil, errdefs.New(errdefs.ErrRefused, "bad Session ID %q", c.SessionID)
	}
	proto, err := a.key(&a.protoKey)
	if err != nil {
		return Signed{}, nil, err
	}
	cc := CapabilityClaims{
		Identity:                a.id,
		SessionID:               c.SessionID,
		ClientID:                c.ClientID,
		AnchorPublicKey:         c.AnchorPublicKey,
		SandboxCredentialID:     a.sandboxCred.ID,
		CoordinatorCredentialID: a.coordCred.ID,
		IssuedAt:                timestamp(a.opts.now()),
	}
	payload := marshal(cc)
	return Signed{Payload: payload, Signatures: map[string][]byte{"coordinator": Sign(proto, RecordSessionCapability, payload)}}, &cc, nil
}

// VerifySessionCapability verifies a capability with the coordinator's
// verified credential (VerifyCredential, role session-coordinator) before
// parsing, then checks it names the credential's generation, that
// credential, and (when sessionID is set) that session.
func VerifySessionCapability(s Signed, coordinator *Credential, sessionID string) (*CapabilityClaims, error) {
	if coordinator.Claims.Role != RoleSessionCoordinator {
		return nil, errdefs.New(errdefs.ErrRefused, "capability verifier is not a session-coordinator credential")
	}
	if len(s.Payload) > MaxRecordBytes || len(s.Signatures) != 1 {
		return nil, errdefs.New(errdefs.ErrRefused, "malformed session request capability")
	}
	if err := coordinator.VerifySignedBy(RecordSessionCapability, s.Payload, s.Signatures["coordinator"]); err != nil {
		return nil, errdefs.New(errdefs.ErrRefused, "session request capability is not signed by the Session Coordinator")
	}
	var c CapabilityClaims
	if err := strictUnmarshal(s.Payload, &c); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("decode session request capability: %w", err), errdefs.ErrCorrupt)
	}
	switch {
	case c.Identity != coordinator.Claims.Identity:
		return nil, errdefs.New(errdefs.ErrRefused, "session request capability is for another generation")
	case c.CoordinatorCredentialID != coordinator.ID:
		return nil, errdefs.New(errdefs.ErrRefused, "session request capability names another coordinator credential")
	case sessionID != "" && c.SessionID != sessionID:
		return nil, errdefs.New(errdefs.ErrRefused, "session request capability is for session %s, not %s", c.SessionID, sessionID)
	case len(c.AnchorPublicKey) != ed25519.PublicKeySize:
		return nil, errdefs.New(errdefs.ErrCorrupt, "session request capability anchor key is not Ed25519")
	}
	return &c, nil
}

// VerifyAnchorSignature checks a developer decision signed by the session's
// anchor named in a verified capability.
func (c *CapabilityClaims) VerifyAnchorSignature(name string, payload, sig []byte) error {
	return Verify(ed25519.PublicKey(c.AnchorPublicKey), name, payload, sig)
}

// SameAnchor reports whether pub is the capability's Session Anchor.
func (c *CapabilityClaims) SameAnchor(pub ed25519.PublicKey) bool {
	return bytes.Equal(c.AnchorPublicKey, pub)
}
