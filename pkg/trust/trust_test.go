package trust

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func ident(gen uint64) GenerationIdentity {
	return GenerationIdentity{
		DomainID:          "0123456789abcdef0123456789abcdef",
		Generation:        gen,
		CoordinatorID:     fmt.Sprintf("%032x", gen),
		Profile:           "default",
		ConfigFingerprint: "sha256:" + strings.Repeat("ab", 32),
	}
}

func newAnchor(t *testing.T, gen uint64, c *clock) *Anchor {
	t.Helper()
	sb, _ := NewID(nil)
	a, err := NewAnchor(ident(gen), sb, Options{Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func refusedErr(t *testing.T, err error, sub string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted (want %q)", sub)
	}
	if !errors.Is(err, errdefs.ErrRefused) && !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("wrong category: %v", err)
	}
	if !strings.Contains(err.Error(), sub) {
		t.Fatalf("%q lacks %q", err, sub)
	}
}

func TestIdentityValidation(t *testing.T) {
	bad := []func(*GenerationIdentity){
		func(g *GenerationIdentity) { g.DomainID = "x" },
		func(g *GenerationIdentity) { g.Generation = 0 },
		func(g *GenerationIdentity) { g.CoordinatorID = "" },
		func(g *GenerationIdentity) { g.Profile = "Bad" },
		func(g *GenerationIdentity) { g.ConfigFingerprint = "md5:00" },
	}
	for i, f := range bad {
		g := ident(1)
		f(&g)
		if _, err := NewAnchor(g, strings.Repeat("e", 32), Options{}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("case %d accepted: %v", i, err)
		}
	}
	if _, err := NewAnchor(ident(1), ident(1).CoordinatorID, Options{}); err == nil {
		t.Error("sandbox ID equal to coordinator ID accepted")
	}
}

func TestDomainSeparation(t *testing.T) {
	_, k, _ := ed25519.GenerateKey(nil)
	pub := k.Public().(ed25519.PublicKey)
	sig := Sign(k, "trust-manifest", []byte("x"))
	if Verify(pub, "trust-manifest", []byte("x"), sig) != nil {
		t.Fatal("good signature refused")
	}
	if Verify(pub, "protocol-credential", []byte("x"), sig) == nil {
		t.Fatal("signature verified as another record")
	}
	if Verify(pub, "trust-manifest", []byte("y"), sig) == nil {
		t.Fatal("signature verified over other bytes")
	}
	m := SignedMessage("trust-manifest", []byte("ab"))
	if string(m) != "lazaret/v1/trust-manifest\x00\x00\x00\x00\x00\x00\x00\x02ab" {
		t.Fatalf("%q", m)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("bad record name accepted")
		}
	}()
	SignedMessage("Trust_Manifest", nil)
}

func TestManifest(t *testing.T) {
	c := &clock{time.Unix(1_800_000_000, 0)}
	a := newAnchor(t, 3, c)
	m := a.Manifest()
	claims, id, err := VerifyManifest(m, ident(3), a.CACertDER())
	if err != nil {
		t.Fatal(err)
	}
	if id != digest(m.Payload) || claims.Identity != ident(3) {
		t.Fatal("claims")
	}
	// Round trip of the transport encoding.
	dec, err := DecodeSigned(m.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := VerifyManifest(dec, ident(3), nil); err != nil {
		t.Fatal(err)
	}
	t.Run("tampered", func(t *testing.T) {
		bad := Signed{Payload: []byte(strings.Replace(string(m.Payload), `"profile":"default"`, `"profile":"evil00"`, 1)), Signatures: m.Signatures}
		if string(bad.Payload) == string(m.Payload) {
			t.Fatal("setup")
		}
		_, _, err := VerifyManifest(bad, ident(3), nil)
		refusedErr(t, err, "CA signature does not verify")
		_, _, err = VerifyManifest(bad, ident(3), a.CACertDER())
		refusedErr(t, err, "pinned CA certificate")
	})
	t.Run("one signature", func(t *testing.T) {
		_, _, err := VerifyManifest(Signed{Payload: m.Payload, Signatures: map[string][]byte{"ca": m.Signatures["ca"]}}, ident(3), nil)
		refusedErr(t, err, "exactly the ca and issuer")
		_, _, err = VerifyManifest(Signed{Payload: m.Payload, Signatures: map[string][]byte{"ca": m.Signatures["ca"], "issuer": m.Signatures["ca"]}}, ident(3), nil)
		refusedErr(t, err, "issuer signature")
	})
	t.Run("wrong generation", func(t *testing.T) {
		_, _, err := VerifyManifest(m, ident(4), nil)
		refusedErr(t, err, "names generation 3")
	})
	t.Run("wrong CA", func(t *testing.T) {
		other := newAnchor(t, 3, c)
		_, _, err := VerifyManifest(m, ident(3), other.CACertDER())
		refusedErr(t, err, "pinned CA")
	})
	t.Run("publication", func(t *testing.T) {
		pub := a.Publication()
		if err := pub.Verify(ident(3), c.now()); err != nil {
			t.Fatal(err)
		}
		other := newAnchor(t, 3, c)
		pub.CoordinatorCert = other.CoordinatorCertDER()
		refusedErr(t, pub.Verify(ident(3), c.now()), "not the one the manifest pins")
	})
}

func TestCredentials(t *testing.T) {
	c := &clock{time.Unix(1_800_000_000, 0)}
	a := newAnchor(t, 1, c)
	mc, mid, err := VerifyManifest(a.Manifest(), ident(1), a.CACertDER())
	if err != nil {
		t.Fatal(err)
	}
	sc := a.SandboxCredential()
	if sc.ID != digest(sc.Signed.Payload) {
		t.Fatal("credential ID is not the SHA-256 of its signed claims")
	}
	expect := CredentialExpect{Identity: ident(1), Role: RoleAgentSandbox, ID: sc.ID, ComponentID: sc.Claims.ComponentID}
	got, err := VerifyCredential(sc.Signed, mc, mid, expect)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Claims.PublicKey) != string(a.SandboxPublicKey()) {
		t.Fatal("public key")
	}
	t.Run("ID mismatch", func(t *testing.T) {
		e := expect
		e.ID = a.CoordinatorCredential().ID
		_, err := VerifyCredential(sc.Signed, mc, mid, e)
		refusedErr(t, err, "credential ID mismatch")
	})
	t.Run("wrong role", func(t *testing.T) {
		e := expect
		e.Role = RoleSessionCoordinator
		_, err := VerifyCredential(sc.Signed, mc, mid, e)
		refusedErr(t, err, "role")
	})
	t.Run("wrong component", func(t *testing.T) {
		e := expect
		e.ComponentID = strings.Repeat("f", 32)
		_, err := VerifyCredential(sc.Signed, mc, mid, e)
		refusedErr(t, err, "component")
	})
	t.Run("wrong generation", func(t *testing.T) {
		e := expect
		e.Identity = ident(2)
		_, err := VerifyCredential(sc.Signed, mc, mid, e)
		refusedErr(t, err, "generation 1")
	})
	t.Run("other issuer", func(t *testing.T) {
		other := newAnchor(t, 1, c)
		omc, omid, _ := VerifyManifest(other.Manifest(), ident(1), nil)
		_, err := VerifyCredential(sc.Signed, omc, omid, expect)
		refusedErr(t, err, "not signed by this generation's protocol issuer")
	})
	t.Run("tampered", func(t *testing.T) {
		bad := Signed{Payload: []byte(strings.Replace(string(sc.Signed.Payload), RoleAgentSandbox, RoleNetworkSidecar, 1)), Signatures: sc.Signed.Signatures}
		_, err := VerifyCredential(bad, mc, mid, expect)
		refusedErr(t, err, "protocol issuer")
	})
	t.Run("request signature", func(t *testing.T) {
		files, err := a.SandboxFiles()
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(files["sandbox.key"])
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		sig := Sign(k.(ed25519.PrivateKey), "escalation-request", []byte("req"))
		if err := got.VerifySignedBy("escalation-request", []byte("req"), sig); err != nil {
			t.Fatal(err)
		}
		if got.VerifySignedBy("escalation-request", []byte("other"), sig) == nil {
			t.Fatal("tampered request accepted")
		}
		for _, name := range []string{"sandbox.cred", "manifest", "coordinator.cred"} {
			if _, err := DecodeSigned(files[name]); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		a.DropSandboxKey()
		if _, err := a.SandboxFiles(); !errors.Is(err, errdefs.ErrRefused) {
			t.Fatal("sandbox key issued after drop")
		}
		if len(a.SandboxPublicKey()) != ed25519.PublicKeySize {
			t.Fatal("public key not retained")
		}
	})
	if _, err := a.IssueCredential("root", strings.Repeat("a", 32), a.SandboxPublicKey()); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatal("unknown role issued")
	}
}

func enroll(t *testing.T, a *Anchor) (ed25519.PrivateKey, *Enrollment) {
	t.Helper()
	key, err := NewClientKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewCSR(key)
	if err != nil {
		t.Fatal(err)
	}
	e, err := a.Enroll(csr)
	if err != nil {
		t.Fatal(err)
	}
	return key, e
}

func TestEnrollment(t *testing.T) {
	c := &clock{time.Unix(1_800_000_000, 0)}
	a := newAnchor(t, 5, c)
	_, e := enroll(t, a)
	if !ValidID(e.ClientID) || !e.NotAfter.Equal(c.t.Add(time.Hour)) {
		t.Fatalf("%+v", e)
	}
	leaf, _ := x509.ParseCertificate(e.CertDER)
	if want := fmt.Sprintf("lazaret://client/%s?coordinator=%s&domain=%s&gen=5", e.ClientID, ident(5).CoordinatorID, ident(5).DomainID); len(leaf.URIs) != 1 || leaf.URIs[0].String() != want {
		t.Fatalf("URI %v, want %s", leaf.URIs, want)
	}
	id, err := a.VerifyClient([][]byte{e.CertDER})
	if err != nil || id.ClientID != e.ClientID {
		t.Fatal(err)
	}
	_, e2 := enroll(t, a)
	if e2.ClientID == e.ClientID {
		t.Fatal("Client CLI IDs repeat")
	}

	t.Run("oversized CSR", func(t *testing.T) {
		key, _ := NewClientKey(nil)
		var names []string
		for i := 0; i < 400; i++ {
			names = append(names, fmt.Sprintf("host-%04d.example.invalid", i))
		}
		big, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(big) <= MaxCSRBytes {
			t.Fatalf("setup: %d bytes", len(big))
		}
		_, err = a.Enroll(big)
		refusedErr(t, err, "exceeds 8192")
	})
	t.Run("bad CSR signature", func(t *testing.T) {
		key, _ := NewClientKey(nil)
		csr, _ := NewCSR(key)
		csr[len(csr)-1] ^= 0xff // the signature is last
		_, err := a.Enroll(csr)
		refusedErr(t, err, "signature")
	})
	t.Run("garbage CSR", func(t *testing.T) {
		_, err := a.Enroll([]byte("not a csr"))
		refusedErr(t, err, "parse certificate request")
	})
	t.Run("non-Ed25519 CSR", func(t *testing.T) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		csr, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, k)
		_, err := a.Enroll(csr)
		refusedErr(t, err, "not Ed25519")
	})
}

func TestVerifyClientChecks(t *testing.T) {
	c := &clock{time.Unix(1_800_000_000, 0)}
	a := newAnchor(t, 2, c)
	_, e := enroll(t, a)

	t.Run("wrong CA", func(t *testing.T) {
		other := newAnchor(t, 2, c)
		_, oe := enroll(t, other)
		_, err := a.VerifyClient([][]byte{oe.CertDER})
		refusedErr(t, err, "not valid for this generation")
	})
	t.Run("previous generation", func(t *testing.T) {
		prev := newAnchor(t, 1, c)
		_, pe := enroll(t, prev)
		_, err := a.VerifyClient([][]byte{pe.CertDER})
		refusedErr(t, err, "not valid for this generation")
	})
	t.Run("same CA but another generation named", func(t *testing.T) {
		// A leaf from this CA that names generation 1 (as a CA reused by
		// mistake would issue) is still refused by the identity check.
		key, _ := NewClientKey(nil)
		tmpl := &x509.Certificate{
			SerialNumber: mustSerial(rand.Reader), NotBefore: c.t.Add(-time.Minute), NotAfter: c.t.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			URIs: []*url.URL{identityURI("client", strings.Repeat("c", 32), ident(1))},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, a.caCert, key.Public(), a.caKey)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.VerifyClient([][]byte{der})
		refusedErr(t, err, "generation 1 of Domain")
	})
	t.Run("expired", func(t *testing.T) {
		c.t = c.t.Add(61 * time.Minute)
		defer func() { c.t = c.t.Add(-61 * time.Minute) }()
		_, err := a.VerifyClient([][]byte{e.CertDER})
		refusedErr(t, err, "expired")
	})
	t.Run("wrong EKU", func(t *testing.T) {
		// The coordinator's serverAuth leaf, from the same CA.
		_, err := a.VerifyClient([][]byte{a.CoordinatorCertDER()})
		refusedErr(t, err, "not valid for this generation")
		// A leaf with both EKUs is refused too.
		key, _ := NewClientKey(nil)
		tmpl := &x509.Certificate{
			SerialNumber: mustSerial(rand.Reader), NotBefore: c.t.Add(-time.Minute), NotAfter: c.t.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
			URIs: []*url.URL{identityURI("client", strings.Repeat("c", 32), ident(2))},
		}
		der, _ := x509.CreateCertificate(rand.Reader, tmpl, a.caCert, key.Public(), a.caKey)
		_, err = a.VerifyClient([][]byte{der})
		refusedErr(t, err, "clientAuth only")
	})
	t.Run("chain", func(t *testing.T) {
		_, err := a.VerifyClient([][]byte{e.CertDER, a.CACertDER()})
		refusedErr(t, err, "exactly its leaf")
	})
	t.Run("destroyed", func(t *testing.T) {
		b := newAnchor(t, 2, c)
		b.Destroy()
		key, _ := NewClientKey(nil)
		csr, _ := NewCSR(key)
		if _, err := b.Enroll(csr); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("enrolled after destroy: %v", err)
		}
	})
}

func TestSessionCapability(t *testing.T) {
	c := &clock{time.Unix(1_800_000_000, 0)}
	a := newAnchor(t, 1, c)
	_, e := enroll(t, a)
	client, err := a.VerifyClient([][]byte{e.CertDER})
	if err != nil {
		t.Fatal(err)
	}
	sa, err := NewSessionAnchor(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := sa.Registration(ident(1), client.ClientID)
	capRec, claims, err := a.IssueSessionCapability(reg, client)
	if err != nil {
		t.Fatal(err)
	}
	if claims.SessionID != sa.SessionID || claims.SandboxCredentialID != a.SandboxCredential().ID {
		t.Fatalf("%+v", claims)
	}
	mc, mid, _ := VerifyManifest(a.Manifest(), ident(1), a.CACertDER())
	coord, err := VerifyCredential(a.CoordinatorCredential().Signed, mc, mid, CredentialExpect{Identity: ident(1), Role: RoleSessionCoordinator, ID: a.CoordinatorCredential().ID})
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifySessionCapability(capRec, coord, sa.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.SameAnchor(sa.Public()) {
		t.Fatal("anchor")
	}
	decision := []byte(`{"request":"r1","approve":true}`)
	if got.VerifyAnchorSignature("developer-decision", decision, sa.Sign("developer-decision", decision)) != nil {
		t.Fatal("decision refused")
	}
	other, _ := NewSessionAnchor(nil)
	if got.VerifyAnchorSignature("developer-decision", decision, other.Sign("developer-decision", decision)) == nil {
		t.Fatal("another session's decision accepted")
	}

	t.Run("registration not signed by its anchor", func(t *testing.T) {
		bad := other.Registration(ident(1), client.ClientID)
		bad.Signatures["anchor"] = reg.Signatures["anchor"]
		_, _, err := a.IssueSessionCapability(bad, client)
		refusedErr(t, err, "not signed by its Session Anchor")
	})
	t.Run("registration for another client", func(t *testing.T) {
		_, e2 := enroll(t, a)
		c2, _ := a.VerifyClient([][]byte{e2.CertDER})
		_, _, err := a.IssueSessionCapability(reg, c2)
		refusedErr(t, err, "another Client CLI")
	})
	t.Run("registration for another generation", func(t *testing.T) {
		_, _, err := a.IssueSessionCapability(sa.Registration(ident(2), client.ClientID), client)
		refusedErr(t, err, "not this generation")
	})
	t.Run("capability for another session", func(t *testing.T) {
		_, err := VerifySessionCapability(capRec, coord, other.SessionID)
		refusedErr(t, err, "is for session")
	})
	t.Run("capability tampered", func(t *testing.T) {
		bad := Signed{Payload: []byte(strings.Replace(string(capRec.Payload), sa.SessionID, other.SessionID, 1)), Signatures: capRec.Signatures}
		_, err := VerifySessionCapability(bad, coord, "")
		refusedErr(t, err, "not signed by the Session Coordinator")
	})
	t.Run("capability from another coordinator", func(t *testing.T) {
		b := newAnchor(t, 1, c)
		_, be := enroll(t, b)
		bc, _ := b.VerifyClient([][]byte{be.CertDER})
		brec, _, err := b.IssueSessionCapability(sa.Registration(ident(1), bc.ClientID), bc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = VerifySessionCapability(brec, coord, "")
		refusedErr(t, err, "not signed by the Session Coordinator")
	})
}

// handshake runs a TLS handshake over net.Pipe.
func handshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, tls.ConnectionState, error, error) {
	t.Helper()
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	deadline := time.Now().Add(10 * time.Second)
	sc.SetDeadline(deadline)
	cc.SetDeadline(deadline)
	s := tls.Server(sc, server)
	cl := tls.Client(cc, client)
	serr := make(chan error, 1)
	go func() {
		err := s.Handshake()
		if err != nil {
			sc.Close() // unblock the client
		}
		serr <- err
	}()
	cerr := cl.Handshake()
	if cerr != nil {
		cc.Close()
	} else {
		// TLS 1.3: the client finishes before the server has checked its
		// certificate; a read surfaces the server's verdict.
		cl.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		var b [1]byte
		if _, err := cl.Read(b[:]); err != nil && !isTimeout(err) {
			cerr = err
		}
	}
	return s.ConnectionState(), cl.ConnectionState(), <-serr, cerr
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestTLSHandshake(t *testing.T) {
	c := &clock{time.Now()}
	a := newAnchor(t, 7, c)
	server, err := a.ServerTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	pub := a.Publication()
	if err := pub.Verify(ident(7), c.now()); err != nil {
		t.Fatal(err)
	}

	t.Run("enrollment without certificate", func(t *testing.T) {
		client, _ := ClientTLSConfig(pub, nil, c.now)
		ss, cs, serr, cerr := handshake(t, server, client)
		if serr != nil || cerr != nil {
			t.Fatalf("server %v client %v", serr, cerr)
		}
		if ss.Version != tls.VersionTLS13 || cs.NegotiatedProtocol != ALPN || ss.DidResume {
			t.Fatalf("%+v", ss)
		}
		if _, err := a.Authenticated(ss); !errors.Is(err, ErrEnrollmentOnly) {
			t.Fatalf("no-cert connection authenticated: %v", err)
		}
	})
	t.Run("mTLS with enrolled certificate", func(t *testing.T) {
		key, e := enroll(t, a)
		cert := ClientCertificate(key, e)
		client, _ := ClientTLSConfig(pub, &cert, c.now)
		ss, _, serr, cerr := handshake(t, server, client)
		if serr != nil || cerr != nil {
			t.Fatalf("server %v client %v", serr, cerr)
		}
		id, err := a.Authenticated(ss)
		if err != nil || id.ClientID != e.ClientID {
			t.Fatalf("%v %+v", err, id)
		}
	})
	t.Run("previous generation certificate refused in handshake", func(t *testing.T) {
		prev := newAnchor(t, 6, c)
		key, e := enroll(t, prev)
		cert := ClientCertificate(key, e)
		client, _ := ClientTLSConfig(pub, &cert, c.now)
		_, _, serr, cerr := handshake(t, server, client)
		if serr == nil || cerr == nil {
			t.Fatalf("server %v client %v", serr, cerr)
		}
	})
	t.Run("client pins the published coordinator", func(t *testing.T) {
		other := newAnchor(t, 7, c)
		client, _ := ClientTLSConfig(other.Publication(), nil, c.now)
		_, _, serr, cerr := handshake(t, server, client)
		if serr == nil || cerr == nil || !strings.Contains(cerr.Error(), "certificate") {
			t.Fatalf("server %v client %v", serr, cerr)
		}
	})
	t.Run("wrong ALPN refused", func(t *testing.T) {
		client, _ := ClientTLSConfig(pub, nil, c.now)
		client.NextProtos = []string{"h2"}
		_, _, serr, cerr := handshake(t, server, client)
		if serr == nil || cerr == nil {
			t.Fatalf("server %v client %v", serr, cerr)
		}
		// A client that offers no ALPN (and checks nothing) is refused by
		// the server itself.
		bare := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
		_, _, serr, _ = handshake(t, server, bare)
		if serr == nil || !strings.Contains(serr.Error(), "ALPN") {
			t.Fatalf("no ALPN accepted: %v", serr)
		}
	})
	t.Run("TLS 1.2 refused", func(t *testing.T) {
		client, _ := ClientTLSConfig(pub, nil, c.now)
		client.MinVersion, client.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		_, _, serr, cerr := handshake(t, server, client)
		if serr == nil || cerr == nil {
			t.Fatalf("server %v client %v", serr, cerr)
		}
	})
	t.Run("resumption impossible", func(t *testing.T) {
		key, e := enroll(t, a)
		cert := ClientCertificate(key, e)
		client, _ := ClientTLSConfig(pub, &cert, c.now)
		client.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		for i := 0; i < 2; i++ {
			ss, cs, serr, cerr := handshake(t, server, client)
			if serr != nil || cerr != nil {
				t.Fatalf("server %v client %v", serr, cerr)
			}
			if ss.DidResume || cs.DidResume {
				t.Fatalf("connection %d resumed", i)
			}
		}
		if server.SessionTicketsDisabled != true || server.ClientAuth != tls.RequestClientCert || server.MinVersion != tls.VersionTLS13 {
			t.Fatal("server configuration")
		}
	})
	t.Run("server name", func(t *testing.T) {
		client, _ := ClientTLSConfig(pub, nil, c.now)
		if client.ServerName != CoordinatorServerName || client.ClientSessionCache != nil {
			t.Fatal("client configuration")
		}
		leaf, _ := x509.ParseCertificate(a.CoordinatorCertDER())
		if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != CoordinatorServerName || len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
			t.Fatalf("coordinator leaf %v %v", leaf.DNSNames, leaf.ExtKeyUsage)
		}
	})

}

func TestPublicationVerifiedIdentity(t *testing.T) {
	c := &clock{t: time.Now()}
	a := newAnchor(t, 3, c)
	id := a.Identity()
	got, err := a.Publication().VerifiedIdentity(id.DomainID, id.Profile, c.now())
	if err != nil || got != id {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := a.Publication().VerifiedIdentity(id.DomainID, "other", c.now()); err == nil {
		t.Fatal("other profile accepted")
	}
	b := newAnchor(t, 3, c)
	forged := a.Publication()
	forged.CACert = b.CACertDER() // a CA that did not sign the manifest
	if _, err := forged.VerifiedIdentity(id.DomainID, id.Profile, c.now()); err == nil {
		t.Fatal("publication with a foreign CA accepted")
	}
}

// TestFormsWithoutRegexp pins the hand-written form checks to the patterns
// they replace.
func TestFormsWithoutRegexp(t *testing.T) {
	patterns := map[string]struct {
		re *regexp.Regexp
		f  func(string) bool
	}{
		"id":          {regexp.MustCompile(`^[0-9a-f]{32}$`), ValidID},
		"fingerprint": {regexp.MustCompile(`^sha256:[0-9a-f]{64}$`), validFingerprint},
		"record name": {regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`), validRecordName},
	}
	hex32 := "0123456789abcdef0123456789abcdef"
	inputs := []string{"", "-", "a", "a-", "-a", "a--b", "a-b", "escalation-request", "A", "a_b", "a.b", "x9-0",
		hex32, hex32[1:], hex32 + "0", strings.ToUpper(hex32), hex32[:31] + "g",
		"sha256:" + hex32 + hex32, "sha256:" + hex32, "sha256:" + hex32 + hex32 + "0", "SHA256:" + hex32 + hex32, "sha256:" + strings.ToUpper(hex32) + hex32}
	for name, p := range patterns {
		for _, in := range inputs {
			if got, want := p.f(in), p.re.MatchString(in); got != want {
				t.Errorf("%s %q: %v, regexp says %v", name, in, got, want)
			}
		}
	}
}
