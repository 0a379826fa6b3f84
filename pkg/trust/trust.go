package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Fixed protocol values.
const (
	// ALPN is the only application protocol of the control socket.
	ALPN = "lazaret-control/1"
	// CoordinatorServerName is the DNS name of the coordinator's TLS leaf.
	CoordinatorServerName = "coordinator.lazaret.invalid"
	// MaxCSRBytes bounds an enrollment CSR.
	MaxCSRBytes = 8192
	// ClientCertLifetime is the validity of an enrolled client leaf.
	ClientCertLifetime = time.Hour
	// URIScheme names Lazaret identities in certificate URI SANs.
	URIScheme = "lazaret"
	// MaxRecordBytes bounds any signed record's claims.
	MaxRecordBytes = 65536
)

// Record names (the lower-kebab names that domain-separate signatures).
const (
	RecordTrustManifest       = "trust-manifest"
	RecordProtocolCredential  = "protocol-credential"
	RecordSessionRegistration = "session-registration"
	RecordSessionCapability   = "session-request-capability"
	// HC↔RS ownership exchange (CausalChildAcquisitionV1 step 6).
	RecordStagedProcessOwnership    = "staged-process-ownership"
	RecordProcessOwnershipCommitAck = "process-ownership-commit-ack"
)

// Roles of Protocol Credentials.
const (
	RoleSessionCoordinator = "session-coordinator"
	RoleAgentSandbox       = "agent-sandbox"
	RoleNetworkSidecar     = "network-sidecar"
	// RoleRuntimeSupervisor signs the Runtime Supervisor's messages to HC.
	RoleRuntimeSupervisor = "runtime-supervisor"
)

// GenerationIdentity is the identity of one Domain generation that every
// credential of the generation is bound to.
type GenerationIdentity struct {
	DomainID   string `json:"domain_id"`
	Generation uint64 `json:"generation"`
	// CoordinatorID is the Session Coordinator ID of this generation.
	CoordinatorID string `json:"coordinator_id"`
	Profile       string `json:"profile"`
	// ConfigFingerprint is the profile's Configuration Fingerprint.
	ConfigFingerprint string `json:"config_fingerprint"`
}

// The forms below are checked without regexp: this package is linked into
// the in-sandbox Escalation Client, whose start is on the escalation path.

// validFingerprint: ^sha256:[0-9a-f]{64}$.
func validFingerprint(s string) bool {
	rest, ok := strings.CutPrefix(s, "sha256:")
	return ok && domain.IsLowerHex(rest, 64)
}

// validRecordName: ^[a-z0-9]+(-[a-z0-9]+)*$ (lower-kebab).
func validRecordName(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Validate checks the identity's fields have their forms.
func (g GenerationIdentity) Validate() error {
	switch {
	case !domain.IsLowerHex(g.DomainID, 32):
		return errdefs.New(errdefs.ErrInvalid, "generation identity: bad Domain ID %q", g.DomainID)
	case g.Generation == 0:
		return errdefs.New(errdefs.ErrInvalid, "generation identity: generation must be at least 1")
	case !domain.IsLowerHex(g.CoordinatorID, 32):
		return errdefs.New(errdefs.ErrInvalid, "generation identity: bad coordinator ID %q", g.CoordinatorID)
	case !domain.ValidProfileName(g.Profile):
		return errdefs.New(errdefs.ErrInvalid, "generation identity: bad profile %q", g.Profile)
	case !validFingerprint(g.ConfigFingerprint):
		return errdefs.New(errdefs.ErrInvalid, "generation identity: bad configuration fingerprint %q", g.ConfigFingerprint)
	}
	return nil
}

// NewID returns a random runtime-unique identifier: 32 lower-case hex
// digits (128 bits), the form of Client CLI, Session, coordinator and
// sandbox IDs.
func NewID(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("random ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidID reports whether s has the form NewID returns.
func ValidID(s string) bool { return domain.IsLowerHex(s, 32) }

// SignedMessage returns the bytes a signature over record name covers.
func SignedMessage(name string, payload []byte) []byte {
	if !validRecordName(name) {
		panic("trust: bad record name " + name)
	}
	prefix := "lazaret/v1/" + name
	m := make([]byte, 0, len(prefix)+8+len(payload))
	m = append(m, prefix...)
	m = binary.BigEndian.AppendUint64(m, uint64(len(payload)))
	return append(m, payload...)
}

// Sign signs payload as record name.
func Sign(key ed25519.PrivateKey, name string, payload []byte) []byte {
	return ed25519.Sign(key, SignedMessage(name, payload))
}

// Verify checks sig over payload as record name.
func Verify(pub ed25519.PublicKey, name string, payload, sig []byte) error {
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, SignedMessage(name, payload), sig) {
		return errdefs.New(errdefs.ErrRefused, "bad %s signature", name)
	}
	return nil
}

// Signed is a signed record: the exact claim bytes and signatures over
// them. It is what travels and what is stored.
type Signed struct {
	Payload []byte `json:"payload"`
	// Signatures by role of the signer (e.g. "ca", "issuer", "coordinator").
	Signatures map[string][]byte `json:"signatures"`
}

// Encode returns the record's transport encoding.
func (s Signed) Encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic("trust: encode signed record: " + err.Error())
	}
	return b
}

// DecodeSigned decodes a record's transport encoding (not its claims).
func DecodeSigned(b []byte) (Signed, error) {
	var s Signed
	if len(b) > 2*MaxRecordBytes {
		return s, errdefs.New(errdefs.ErrRefused, "signed record of %d bytes is too large", len(b))
	}
	if err := strictUnmarshal(b, &s); err != nil {
		return s, errdefs.Mark(fmt.Errorf("decode signed record: %w", err), errdefs.ErrCorrupt)
	}
	if len(s.Payload) > MaxRecordBytes {
		return s, errdefs.New(errdefs.ErrRefused, "record claims of %d bytes exceed %d", len(s.Payload), MaxRecordBytes)
	}
	return s, nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

// digest is the SHA-256 of b in hex.
func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("trust: encode claims: " + err.Error())
	}
	return b
}

// timestamp is a claim time: Unix seconds.
func timestamp(t time.Time) int64 { return t.Unix() }
