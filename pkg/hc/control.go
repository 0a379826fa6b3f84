package hc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/rawio"
	"github.com/lazaret/lazaret/pkg/shellquote"
	"github.com/lazaret/lazaret/pkg/trust"
)

// handshakeTimeout bounds a control connection's TLS handshake.
var handshakeTimeout = 10 * time.Second

// enrollFrameMax bounds the one frame an unauthenticated connection may
// send: a CSR of at most trust.MaxCSRBytes plus protobuf framing.
const enrollFrameMax = trust.MaxCSRBytes + 64

// handshake runs TLS 1.3 on a control connection and authenticates the
// client: nil client (and no error) means the connection presented no
// certificate and may only enroll.
func (c *coordinator) handshake(raw *rawio.Conn) (*tls.Conn, *trust.ClientIdentity, error) {
	tconn := c.pub.Server(raw)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := tconn.HandshakeContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("TLS handshake: %w", err)
	}
	client, err := c.anchor.Authenticated(tconn.ConnectionState())
	if errors.Is(err, trust.ErrEnrollmentOnly) {
		return tconn, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return tconn, client, nil
}

// enroll serves the only operation of a connection without a client
// certificate: one bounded EnrollRequest → Enrollment, then close.
func (c *coordinator) enroll(conn *control.Conn) {
	var f lv1.ClientFrame
	if err := conn.ReadMax(&f, enrollFrameMax); err != nil {
		refuse(conn, errdefs.Mark(fmt.Errorf("enrollment: %w (a certificate request is at most %d bytes)", err, trust.MaxCSRBytes), errdefs.ErrRefused))
		return
	}
	req := f.GetEnroll()
	if req == nil {
		refuse(conn, trust.ErrEnrollmentOnly)
		return
	}
	e, err := c.anchor.Enroll(req.CsrDer)
	if err != nil {
		refuse(conn, err)
		return
	}
	c.log.Debug("client enrolled", "client_cli_id", e.ClientID)
	conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Enrollment{Enrollment: &lv1.Enrollment{CertificateDer: e.CertDER, ClientCliId: e.ClientID}}})
}

// admit checks a RunRequest against the generation's configuration and
// issues the session's Session Request Capability.
func (c *coordinator) admit(req *lv1.RunRequest, client *trust.ClientIdentity) ([]byte, *trust.CapabilityClaims, error) {
	if req.ConfigurationFingerprint != c.cfg.profile.Fingerprint() {
		joining, err := config.FromCanonical(req.CanonicalProfile)
		if err != nil || joining.Fingerprint() != req.ConfigurationFingerprint {
			return nil, nil, errdefs.New(errdefs.ErrRefused, "the running Domain uses another configuration (fingerprint %s, yours %s)", c.cfg.profile.Fingerprint(), req.ConfigurationFingerprint)
		}
		c.mu.Lock()
		left, lingering := c.sessions.LingerLeft()
		stop := "lazaret stop -p " + c.cfg.profileName + " -C " + shellquote.Word(c.cfg.workspace)
		what := config.WithSessions
		switch {
		case c.st == stateStarting:
			what = config.Starting
		case lingering && c.st == stateRunning:
			what = config.Lingering
		}
		remedy := config.MismatchRemedy(stop, c.sessions.Linger(), left, what)
		c.mu.Unlock()
		return nil, nil, config.MismatchError(c.cfg.profile, joining, remedy)
	}
	reg, err := trust.DecodeSigned(req.SessionRegistration)
	if err != nil {
		return nil, nil, errdefs.Mark(fmt.Errorf("session registration: %w", err), errdefs.ErrRefused)
	}
	capability, claims, err := c.anchor.IssueSessionCapability(reg, client)
	if err != nil {
		return nil, nil, err
	}
	return capability.Encode(), claims, nil
}

// serveStatus answers a StatusRequest with the Domain's state document.
func (c *coordinator) serveStatus(conn *control.Conn, req *lv1.StatusRequest) {
	if req.ProtocolVersion != lv1.ProtocolVersion_PROTOCOL_VERSION_1 {
		refuse(conn, errdefs.New(errdefs.ErrRefused, "control protocol version %d is not supported", req.ProtocolVersion))
		return
	}
	doc := c.statusDocument()
	doc.Limits = c.limitsStatus()
	conn.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Status{Status: &lv1.Status{Domain: doc}}})
}
