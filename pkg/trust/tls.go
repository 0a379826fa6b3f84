package trust

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// ErrEnrollmentOnly is returned by Authenticated for a connection without
// a client certificate: it may only enroll.
var ErrEnrollmentOnly = errdefs.Mark(errors.New("this connection presented no client certificate: it may only enroll; reconnect with the enrolled certificate"), errdefs.ErrRefused)

// ServerTLSConfig is the control socket's server configuration: TLS 1.3
// only, ALPN lazaret-control/1 required, no session tickets (so no
// resumption and no early data; Go never accepts 0-RTT), the coordinator's
// serverAuth leaf, and a client certificate requested but optional (a
// connection without one may only enroll). A presented certificate is
// verified by VerifyClient in VerifyConnection, so a bad or stale
// certificate fails the handshake.
func (a *Anchor) ServerTLSConfig() (*tls.Config, error) {
	key, err := a.key(&a.tlsKey)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(a.tlsCertDER)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		MaxVersion:             tls.VersionTLS13,
		NextProtos:             []string{ALPN},
		Certificates:           []tls.Certificate{{Certificate: [][]byte{a.tlsCertDER}, PrivateKey: key, Leaf: leaf}},
		ClientAuth:             tls.RequestClientCert,
		SessionTicketsDisabled: true,
		Time:                   a.opts.now,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := checkState(cs); err != nil {
				return err
			}
			if len(cs.PeerCertificates) > 0 {
				_, err := a.VerifyClient(rawChain(cs.PeerCertificates))
				return err
			}
			return nil
		},
	}, nil
}

// Authenticated returns the Client CLI of an established server-side
// connection, or ErrEnrollmentOnly when it presented no certificate.
func (a *Anchor) Authenticated(cs tls.ConnectionState) (*ClientIdentity, error) {
	if err := checkState(cs); err != nil {
		return nil, err
	}
	if len(cs.PeerCertificates) == 0 {
		return nil, ErrEnrollmentOnly
	}
	return a.VerifyClient(rawChain(cs.PeerCertificates))
}

func checkState(cs tls.ConnectionState) error {
	switch {
	case cs.Version != tls.VersionTLS13:
		return errdefs.New(errdefs.ErrRefused, "control connection is not TLS 1.3")
	case cs.NegotiatedProtocol != ALPN:
		return errdefs.New(errdefs.ErrRefused, "control connection did not negotiate ALPN %s", ALPN)
	case cs.DidResume:
		return errdefs.New(errdefs.ErrRefused, "control connections are never resumed")
	}
	return nil
}

func rawChain(certs []*x509.Certificate) [][]byte {
	out := make([][]byte, len(certs))
	for i, c := range certs {
		out[i] = c.Raw
	}
	return out
}

// ClientTLSConfig is a CLI's configuration for the control socket: TLS 1.3
// only, ALPN lazaret-control/1, ServerName coordinator.lazaret.invalid,
// the generation CA of a verified publication as the only root, the exact
// coordinator leaf the publication pins, no session cache. cert is nil for
// the enrollment connection and the enrolled certificate otherwise. now
// may be nil (time.Now).
func ClientTLSConfig(pub Publication, cert *tls.Certificate, now func() time.Time) (*tls.Config, error) {
	ca, err := x509.ParseCertificate(pub.CACert)
	if err != nil {
		return nil, errdefs.Mark(fmt.Errorf("publication CA certificate: %w", err), errdefs.ErrCorrupt)
	}
	if now == nil {
		now = time.Now
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	pinned := append([]byte(nil), pub.CoordinatorCert...)
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		ServerName: CoordinatorServerName,
		RootCAs:    pool,
		Time:       now,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := checkState(cs); err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, pinned) {
				return errdefs.New(errdefs.ErrRefused, "the coordinator presented another certificate than the published one")
			}
			return verifyServerLeaf(cs.PeerCertificates[0], ca, now())
		},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg, nil
}
