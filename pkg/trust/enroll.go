package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// NewClientKey generates a Client CLI's TLS key (kept in CLI memory).
func NewClientKey(r io.Reader) (ed25519.PrivateKey, error) {
	if r == nil {
		r = randReader()
	}
	_, priv, err := ed25519.GenerateKey(r)
	return priv, err
}

// NewCSR returns a DER certificate request signed by key. The subject is
// ignored by the coordinator, which assigns the Client CLI ID.
func NewCSR(key ed25519.PrivateKey) ([]byte, error) {
	return x509.CreateCertificateRequest(randReader(), &x509.CertificateRequest{Subject: pkix.Name{CommonName: "lazaret client"}}, key)
}

// Enrollment is the result of a successful enrollment.
type Enrollment struct {
	// ClientID is the new Client CLI ID.
	ClientID string
	// CertDER is the one-hour clientAuth leaf.
	CertDER  []byte
	NotAfter time.Time
}

// Enroll verifies a signed CSR of at most MaxCSRBytes (Ed25519 key, valid
// self-signature) and issues a ClientCertLifetime clientAuth leaf bound to
// a new Client CLI ID and this generation. The caller has checked the
// connection is from the developer's UID.
func (a *Anchor) Enroll(csrDER []byte) (*Enrollment, error) {
	if len(csrDER) > MaxCSRBytes {
		return nil, errdefs.New(errdefs.ErrRefused, "certificate request of %d bytes exceeds %d", len(csrDER), MaxCSRBytes)
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("parse certificate request: %w", err), errdefs.ErrRefused)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("certificate request signature: %w", err), errdefs.ErrRefused)
	}
	pub, ok := csr.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, errdefs.New(errdefs.ErrRefused, "certificate request key is %T, not Ed25519", csr.PublicKey)
	}
	caKey, err := a.key(&a.caKey)
	if err != nil {
		return nil, err
	}
	clientID, err := NewID(a.opts.rand())
	if err != nil {
		return nil, err
	}
	now := a.opts.now()
	tmpl := &x509.Certificate{
		SerialNumber: mustSerial(a.opts.rand()),
		Subject:      pkix.Name{CommonName: "lazaret client " + clientID},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(ClientCertLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{identityURI("client", clientID, a.id)},
	}
	der, err := x509.CreateCertificate(a.opts.rand(), tmpl, a.caCert, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("issue client certificate: %w", err)
	}
	return &Enrollment{ClientID: clientID, CertDER: der, NotAfter: tmpl.NotAfter}, nil
}

// ClientCertificate assembles the CLI's TLS certificate from its key and
// enrolled leaf.
func ClientCertificate(key ed25519.PrivateKey, e *Enrollment) tls.Certificate {
	leaf, _ := x509.ParseCertificate(e.CertDER)
	return tls.Certificate{Certificate: [][]byte{e.CertDER}, PrivateKey: key, Leaf: leaf}
}

// ClientIdentity is an authenticated Client CLI.
type ClientIdentity struct {
	ClientID string
	NotAfter time.Time
	// PublicKey is the client's TLS key.
	PublicKey ed25519.PublicKey
}

// VerifyClient checks a presented client certificate chain: the leaf is
// issued by this generation's CA, is clientAuth-only, is valid now, and
// its URI names a client of exactly this generation (Domain, generation,
// coordinator). A certificate of a previous generation fails the chain
// check (another CA) and the generation check.
func (a *Anchor) VerifyClient(chain [][]byte) (*ClientIdentity, error) {
	if len(chain) != 1 {
		return nil, errdefs.New(errdefs.ErrRefused, "client must present exactly its leaf certificate (got %d)", len(chain))
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("client certificate: %w", err), errdefs.ErrRefused)
	}
	pool := x509.NewCertPool()
	pool.AddCert(a.caCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: a.opts.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, errdefs.Mark(fmt.Errorf("client certificate is not valid for this generation: %w", err), errdefs.ErrRefused)
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || len(leaf.UnknownExtKeyUsage) != 0 {
		return nil, errdefs.New(errdefs.ErrRefused, "client certificate must be clientAuth only")
	}
	if leaf.IsCA {
		return nil, errdefs.New(errdefs.ErrRefused, "client certificate is a CA")
	}
	id, err := parseIdentityURI(leaf, "client", a.id)
	if err != nil {
		return nil, err
	}
	pub, ok := leaf.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, errdefs.New(errdefs.ErrRefused, "client key is not Ed25519")
	}
	return &ClientIdentity{ClientID: id, NotAfter: leaf.NotAfter, PublicKey: pub}, nil
}

// parseIdentityURI returns the component ID of the single lazaret URI of
// kind in cert, checking it names generation id.
func parseIdentityURI(cert *x509.Certificate, kind string, id GenerationIdentity) (string, error) {
	var found *url.URL
	for _, u := range cert.URIs {
		if u.Scheme == URIScheme {
			if found != nil {
				return "", errdefs.New(errdefs.ErrRefused, "certificate names more than one lazaret identity")
			}
			found = u
		}
	}
	if found == nil || found.Host != kind || len(found.Path) < 2 {
		return "", errdefs.New(errdefs.ErrRefused, "certificate does not name a lazaret %s", kind)
	}
	comp := found.Path[1:]
	if !ValidID(comp) {
		return "", errdefs.New(errdefs.ErrRefused, "certificate names a bad %s ID %q", kind, comp)
	}
	q := found.Query()
	if q.Get("domain") != id.DomainID || q.Get("gen") != strconv.FormatUint(id.Generation, 10) || q.Get("coordinator") != id.CoordinatorID {
		return "", errdefs.New(errdefs.ErrRefused, "certificate is for generation %s of Domain %s, not generation %d of Domain %s: enroll again", q.Get("gen"), q.Get("domain"), id.Generation, id.DomainID)
	}
	return comp, nil
}

// verifyServerLeaf checks the coordinator leaf: issued by ca, valid at now,
// serverAuth only, for CoordinatorServerName.
func verifyServerLeaf(leaf, ca *x509.Certificate, now time.Time) error {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, DNSName: CoordinatorServerName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return errdefs.Mark(fmt.Errorf("coordinator certificate: %w", err), errdefs.ErrRefused)
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || len(leaf.UnknownExtKeyUsage) != 0 || leaf.IsCA {
		return errdefs.New(errdefs.ErrRefused, "coordinator certificate must be serverAuth only")
	}
	if !bytes.Equal(leaf.RawIssuer, ca.RawSubject) {
		return errdefs.New(errdefs.ErrRefused, "coordinator certificate has another issuer")
	}
	return nil
}
