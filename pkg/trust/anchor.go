package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// Options injects randomness and time.
type Options struct {
	Rand io.Reader        // default crypto/rand
	Now  func() time.Time // default time.Now
}

func (o Options) rand() io.Reader {
	if o.Rand == nil {
		return rand.Reader
	}
	return o.Rand
}

func (o Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// longLived is the validity of the generation's CA and coordinator leaf:
// they are ephemeral (the generation ends first), so their dates only need
// to cover it.
const longLived = 10 * 365 * 24 * time.Hour

// Anchor is one generation's Trust Anchor, held in Host Coordinator memory
// only. The zero value is not usable; create with NewAnchor.
type Anchor struct {
	id   GenerationIdentity
	opts Options

	mu         sync.Mutex
	caKey      ed25519.PrivateKey
	issuerKey  ed25519.PrivateKey
	tlsKey     ed25519.PrivateKey
	protoKey   ed25519.PrivateKey
	sandboxKey ed25519.PrivateKey // nil once dropped

	caCert      *x509.Certificate
	tlsCertDER  []byte
	manifest    Signed
	manifestID  string
	coordCred   *Credential
	sandboxCred *Credential
	sandboxPub  ed25519.PublicKey
}

// NewAnchor creates the generation's keys, CA certificate, Trust Manifest,
// coordinator TLS leaf and the coordinator and sandbox Protocol
// Credentials (sandbox ID sandboxID, a NewID).
func NewAnchor(id GenerationIdentity, sandboxID string, opts Options) (*Anchor, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	if !ValidID(sandboxID) || sandboxID == id.CoordinatorID {
		return nil, errdefs.New(errdefs.ErrInvalid, "bad Agent Sandbox ID %q: a NewID distinct from the coordinator ID", sandboxID)
	}
	a := &Anchor{id: id, opts: opts}
	keys := []*ed25519.PrivateKey{&a.caKey, &a.issuerKey, &a.tlsKey, &a.protoKey, &a.sandboxKey}
	for _, k := range keys {
		_, priv, err := ed25519.GenerateKey(opts.rand())
		if err != nil {
			return nil, fmt.Errorf("generate key: %w", err)
		}
		*k = priv
	}
	now := opts.now()
	caTmpl := &x509.Certificate{
		SerialNumber:          mustSerial(opts.rand()),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("lazaret generation CA %s/%d", id.DomainID, id.Generation)},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(longLived),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{identityURI("generation", id.CoordinatorID, id)},
	}
	caDER, err := x509.CreateCertificate(opts.rand(), caTmpl, caTmpl, a.caKey.Public(), a.caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	if a.caCert, err = x509.ParseCertificate(caDER); err != nil {
		return nil, err
	}
	tlsTmpl := &x509.Certificate{
		SerialNumber: mustSerial(opts.rand()),
		Subject:      pkix.Name{CommonName: CoordinatorServerName},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(longLived),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{CoordinatorServerName},
		URIs:         []*url.URL{identityURI("coordinator", id.CoordinatorID, id)},
	}
	if a.tlsCertDER, err = x509.CreateCertificate(opts.rand(), tlsTmpl, a.caCert, a.tlsKey.Public(), a.caKey); err != nil {
		return nil, fmt.Errorf("create coordinator certificate: %w", err)
	}
	claims := ManifestClaims{
		Identity:              id,
		CAPublicKey:           a.caKey.Public().(ed25519.PublicKey),
		IssuerPublicKey:       a.issuerKey.Public().(ed25519.PublicKey),
		CACertSHA256:          digest(caDER),
		CoordinatorCertSHA256: digest(a.tlsCertDER),
		CreatedAt:             timestamp(now),
	}
	payload := marshal(claims)
	a.manifest = Signed{Payload: payload, Signatures: map[string][]byte{
		"ca":     Sign(a.caKey, RecordTrustManifest, payload),
		"issuer": Sign(a.issuerKey, RecordTrustManifest, payload),
	}}
	a.manifestID = digest(payload)
	if a.coordCred, err = a.IssueCredential(RoleSessionCoordinator, id.CoordinatorID, a.protoKey.Public().(ed25519.PublicKey)); err != nil {
		return nil, err
	}
	a.sandboxPub = a.sandboxKey.Public().(ed25519.PublicKey)
	if a.sandboxCred, err = a.IssueCredential(RoleAgentSandbox, sandboxID, a.sandboxPub); err != nil {
		return nil, err
	}
	return a, nil
}

func mustSerial(r io.Reader) *big.Int {
	n, err := rand.Int(r, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("trust: serial: " + err.Error())
	}
	return n.Add(n, big.NewInt(1))
}

// identityURI names a component of generation id:
// lazaret://KIND/COMPONENT?domain=D&gen=N&coordinator=C.
func identityURI(kind, component string, id GenerationIdentity) *url.URL {
	q := url.Values{}
	q.Set("domain", id.DomainID)
	q.Set("gen", strconv.FormatUint(id.Generation, 10))
	q.Set("coordinator", id.CoordinatorID)
	return &url.URL{Scheme: URIScheme, Host: kind, Path: "/" + component, RawQuery: q.Encode()}
}

// Identity returns the generation identity.
func (a *Anchor) Identity() GenerationIdentity { return a.id }

// CACertDER returns the generation CA certificate.
func (a *Anchor) CACertDER() []byte { return append([]byte(nil), a.caCert.Raw...) }

// CoordinatorCertDER returns the coordinator's TLS leaf.
func (a *Anchor) CoordinatorCertDER() []byte { return append([]byte(nil), a.tlsCertDER...) }

// Manifest returns the signed Trust Manifest.
func (a *Anchor) Manifest() Signed { return a.manifest }

// CoordinatorCredential returns the Session Coordinator's Protocol
// Credential (its verification credential, given to the sandbox).
func (a *Anchor) CoordinatorCredential() *Credential { return a.coordCred }

// SandboxCredential returns the Agent Sandbox's Protocol Credential.
func (a *Anchor) SandboxCredential() *Credential { return a.sandboxCred }

// SandboxPublicKey is the sandbox request-signing public key (retained
// after the private key is dropped).
func (a *Anchor) SandboxPublicKey() ed25519.PublicKey { return a.sandboxPub }

// Publication is what the Host Coordinator publishes in the host-private
// runtime directory for CLIs: it pins the CA, the manifest and the
// coordinator TLS leaf. It contains no private key.
type Publication struct {
	CACert          []byte `json:"ca_cert"`
	Manifest        Signed `json:"manifest"`
	CoordinatorCert []byte `json:"coordinator_cert"`
}

// Publication returns the generation's publication.
func (a *Anchor) Publication() Publication {
	return Publication{CACert: a.CACertDER(), Manifest: a.manifest, CoordinatorCert: a.CoordinatorCertDER()}
}

// SandboxKeyFile is the name, among SandboxFiles, of the sandbox's private
// request-signing key: the only private key that enters the sandbox.
const SandboxKeyFile = "sandbox.key"

// SandboxFiles returns the files at the sandbox's read-only credential
// path: the sandbox private key (PKCS#8 PEM), its credential, the Trust
// Manifest and the coordinator's verification credential. It fails once
// the key has been dropped.
func (a *Anchor) SandboxFiles() (map[string][]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sandboxKey == nil {
		return nil, errdefs.New(errdefs.ErrRefused, "the sandbox private key was dropped; it is not issued twice")
	}
	der, err := x509.MarshalPKCS8PrivateKey(a.sandboxKey)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		SandboxKeyFile:     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"sandbox.cred":     a.sandboxCred.Signed.Encode(),
		"manifest":         a.manifest.Encode(),
		"coordinator.cred": a.coordCred.Signed.Encode(),
	}, nil
}

// DropSandboxKey forgets the sandbox private key (after the running
// sandbox holds its credential mount and HC has unlinked the source).
func (a *Anchor) DropSandboxKey() {
	a.mu.Lock()
	defer a.mu.Unlock()
	wipe(a.sandboxKey)
	a.sandboxKey = nil
}

// Destroy wipes every private key. Call it after publication is withdrawn;
// the Anchor is unusable afterwards.
func (a *Anchor) Destroy() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range []*ed25519.PrivateKey{&a.caKey, &a.issuerKey, &a.tlsKey, &a.protoKey, &a.sandboxKey} {
		wipe(*k)
		*k = nil
	}
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}

func (a *Anchor) key(k *ed25519.PrivateKey) (ed25519.PrivateKey, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if *k == nil {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the Trust Anchor was destroyed")
	}
	return *k, nil
}

// ManifestClaims are the Trust Manifest's signed claims.
type ManifestClaims struct {
	Identity              GenerationIdentity `json:"identity"`
	CAPublicKey           []byte             `json:"ca_public_key"`
	IssuerPublicKey       []byte             `json:"issuer_public_key"`
	CACertSHA256          string             `json:"ca_cert_sha256"`
	CoordinatorCertSHA256 string             `json:"coordinator_cert_sha256"`
	CreatedAt             int64              `json:"created_at"`
}

// VerifyManifest verifies a Trust Manifest: both signatures (by the CA key
// and by the issuer key it names) over its exact bytes, that it names
// generation expect, and, when caCertDER is given, that it pins that CA
// certificate — whose key then checks the CA signature before the claims
// are parsed at all. It returns the claims and the manifest ID (SHA-256 of
// the claim bytes).
func VerifyManifest(m Signed, expect GenerationIdentity, caCertDER []byte) (*ManifestClaims, string, error) {
	if len(m.Payload) > MaxRecordBytes {
		return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest too large")
	}
	if len(m.Signatures) != 2 || m.Signatures["ca"] == nil || m.Signatures["issuer"] == nil {
		return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest must carry exactly the ca and issuer signatures")
	}
	var pinned ed25519.PublicKey
	if caCertDER != nil {
		ca, err := x509.ParseCertificate(caCertDER)
		if err != nil {
			return nil, "", errdefs.Mark(fmt.Errorf("CA certificate: %w", err), errdefs.ErrCorrupt)
		}
		pub, ok := ca.PublicKey.(ed25519.PublicKey)
		if !ok {
			return nil, "", errdefs.New(errdefs.ErrRefused, "CA certificate key is not Ed25519")
		}
		if err := Verify(pub, RecordTrustManifest, m.Payload, m.Signatures["ca"]); err != nil {
			return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest: CA signature does not verify with the pinned CA certificate")
		}
		pinned = pub
	}
	var c ManifestClaims
	if err := strictUnmarshal(m.Payload, &c); err != nil {
		return nil, "", errdefs.Mark(fmt.Errorf("decode trust manifest: %w", err), errdefs.ErrCorrupt)
	}
	if err := Verify(c.CAPublicKey, RecordTrustManifest, m.Payload, m.Signatures["ca"]); err != nil {
		return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest: CA signature does not verify")
	}
	if err := Verify(c.IssuerPublicKey, RecordTrustManifest, m.Payload, m.Signatures["issuer"]); err != nil {
		return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest: issuer signature does not verify")
	}
	if bytes.Equal(c.CAPublicKey, c.IssuerPublicKey) {
		return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest: CA and issuer keys must be distinct")
	}
	if c.Identity != expect {
		return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest names generation %d of Domain %s (coordinator %s), expected generation %d of Domain %s (coordinator %s)",
			c.Identity.Generation, c.Identity.DomainID, c.Identity.CoordinatorID, expect.Generation, expect.DomainID, expect.CoordinatorID)
	}
	if pinned != nil && (digest(caCertDER) != c.CACertSHA256 || !bytes.Equal(pinned, c.CAPublicKey)) {
		return nil, "", errdefs.New(errdefs.ErrRefused, "trust manifest pins another CA certificate")
	}
	return &c, digest(m.Payload), nil
}

// Verify checks a publication read from the runtime directory: the
// manifest for generation expect pins the CA certificate and the
// coordinator leaf, and the leaf is a serverAuth-only certificate for
// CoordinatorServerName issued by the CA.
func (p Publication) Verify(expect GenerationIdentity, now time.Time) error {
	c, _, err := VerifyManifest(p.Manifest, expect, p.CACert)
	if err != nil {
		return err
	}
	if digest(p.CoordinatorCert) != c.CoordinatorCertSHA256 {
		return errdefs.New(errdefs.ErrRefused, "publication: the coordinator certificate is not the one the manifest pins")
	}
	ca, _ := x509.ParseCertificate(p.CACert)
	leaf, err := x509.ParseCertificate(p.CoordinatorCert)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("coordinator certificate: %w", err), errdefs.ErrCorrupt)
	}
	return verifyServerLeaf(leaf, ca, now)
}

// VerifiedIdentity verifies a publication read from the host-private
// runtime directory for Domain domainID and profile, and returns the
// generation identity its manifest names. The CA signature is checked with
// the pinned CA certificate before the claims are believed.
func (p Publication) VerifiedIdentity(domainID, profile string, now time.Time) (GenerationIdentity, error) {
	var c ManifestClaims
	if len(p.Manifest.Payload) > MaxRecordBytes {
		return GenerationIdentity{}, errdefs.New(errdefs.ErrRefused, "trust manifest too large")
	}
	if err := strictUnmarshal(p.Manifest.Payload, &c); err != nil {
		return GenerationIdentity{}, errdefs.Mark(fmt.Errorf("decode trust manifest: %w", err), errdefs.ErrCorrupt)
	}
	if err := p.Verify(c.Identity, now); err != nil {
		return GenerationIdentity{}, err
	}
	if c.Identity.DomainID != domainID || c.Identity.Profile != profile {
		return GenerationIdentity{}, errdefs.New(errdefs.ErrRefused, "the published coordinator serves Domain %s profile %q, not Domain %s profile %q", c.Identity.DomainID, c.Identity.Profile, domainID, profile)
	}
	return c.Identity, nil
}
