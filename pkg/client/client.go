// Package client is the Client CLI's half of the control protocol
// (api/lazaret/v1/control.proto) with a Domain's Host Coordinator:
//
//   - Dial reaches the control socket through the verified, developer-owned
//     runtime directory and checks the listener's uid;
//   - Authenticate pins the generation's publication (the coordinator's CA
//     and Trust Manifest), enrolls a fresh in-memory key on a
//     certificate-less connection and dials again with the issued leaf (the
//     second handshake overlaps the enrollment; PrepareKeys generates the
//     key ahead);
//   - Starter starts the Domain's coordinator when nothing serves it, or
//     joins the running one, and runs a Client Session, retrying while the
//     Domain is stopping (Session: the request, the frame reader and the
//     client's frames); a start hands itself to the StandbyCoordinator the
//     CLI started ahead, when it has one (package hcstandby);
//   - Status and Stop are the one-request operations; Statuses builds the
//     typed state document of every Domain under a Storage Root, which
//     MarshalStatusJSON renders for `lazaret status --json`.
//
// Terminals, signals and rendering stay with the caller: this package sends
// and interprets frames and never touches the user's terminal.
package client

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/rawio"
	"github.com/lazaret/lazaret/pkg/trust"
	"github.com/lazaret/lazaret/pkg/trusteddir"
)

// ErrNotPublished means the Domain's coordinator is not serving: the Domain
// is stopped, starting or stopping. A caller that wants it running dials
// again (or starts it).
var ErrNotPublished = errdefs.New(errdefs.ErrUnavailable, "the Domain is not published")

// enrollTimeout bounds enrollment and the authenticated handshake.
const enrollTimeout = 10 * time.Second

// maxPublication bounds the publication file (a few KiB).
const maxPublication = 1 << 20

// ReadPublication reads and verifies the generation's publication in the
// host-private runtime directory and returns it with the generation
// identity its Trust Manifest names.
func ReadPublication(paths domain.Paths, profile string) (trust.Publication, trust.GenerationIdentity, error) {
	var pub trust.Publication
	d, err := openRuntime(paths)
	if err != nil {
		return pub, trust.GenerationIdentity{}, err
	}
	b, err := d.ReadFile(domain.PublicationName, maxPublication)
	d.Close()
	if errors.Is(err, fs.ErrNotExist) {
		return pub, trust.GenerationIdentity{}, ErrNotPublished
	}
	if err != nil {
		return pub, trust.GenerationIdentity{}, err
	}
	if err := json.Unmarshal(b, &pub); err != nil {
		return pub, trust.GenerationIdentity{}, errdefs.Mark(fmt.Errorf("publication %s: %w", domain.PublicationName, err), errdefs.ErrCorrupt)
	}
	id, err := pub.VerifiedIdentity(string(paths.ID), profile, time.Now())
	return pub, id, err
}

// openRuntime opens the Domain's runtime directory only after verifying it
// and the runtime root above it: real directories (never a symlink) owned by
// the developer with mode 0700, each opened beneath the verified descriptor
// of its parent (pkg/trusteddir). A missing one means the Domain is not
// published; anything else is refused with the path and the fix before a
// byte is read or sent.
func openRuntime(paths domain.Paths) (*trusteddir.Dir, error) {
	root, err := trusteddir.OpenPrivate(filepath.Dir(paths.RuntimeDir), os.Getuid())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotPublished
	}
	if err != nil {
		return nil, fmt.Errorf("runtime root: %w", err)
	}
	defer root.Close()
	d, err := root.OpenPrivate(filepath.Base(paths.RuntimeDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotPublished
	}
	if err != nil {
		return nil, fmt.Errorf("Domain runtime directory: %w", err)
	}
	return d, nil
}

// Dial connects to the Domain's control socket through the verified
// runtime directory and checks that the listener runs as the developer
// (SO_PEERCRED). ErrNotPublished when nothing listens; a refusal
// (errdefs.ErrRefused) when the directory or the listener is not trusted.
func Dial(paths domain.Paths) (*net.UnixConn, error) {
	d, err := openRuntime(paths)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	conn, err := d.DialUnix(domain.ControlSocketName)
	if errors.Is(err, errdefs.ErrRefused) {
		return nil, err
	}
	if err != nil {
		return nil, ErrNotPublished
	}
	return conn, nil
}

// Conn is an authenticated (mutual TLS) control connection and the
// generation and Client CLI identity it is bound to.
type Conn struct {
	conn net.Conn
	fc   *control.Conn
	// Identity is the generation the coordinator's Trust Manifest names.
	Identity trust.GenerationIdentity
	// ClientID is the Client CLI ID the coordinator issued at enrollment.
	ClientID string
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

// Connect dials the Domain and authenticates.
func Connect(paths domain.Paths, profile string) (*Conn, error) {
	return connectWithin(paths, profile, enrollTimeout)
}

// connectWithin is Connect with bound in place of enrollTimeout.
func connectWithin(paths domain.Paths, profile string, bound time.Duration) (*Conn, error) {
	raw, err := Dial(paths)
	if err != nil {
		return nil, err
	}
	return authenticate(raw, paths, profile, nil, bound)
}

// Authenticate turns a dialed control connection into an authenticated
// one: it pins the published coordinator, enrolls a fresh in-memory
// Ed25519 key on this certificate-less connection (the only thing such a
// connection may do), and dials again with the issued one-hour leaf. It
// takes raw over, also on error. ErrNotPublished means the coordinator
// withdrew meanwhile (it is stopping).
//
// The two connections overlap: the second is dialled and its handshake
// started before the enrollment, and the handshake presents the issued
// leaf only once the enrollment returned it (GetClientCertificate waits
// for it). The coordinator's half of that handshake (its key share and
// signature) and this CLI's verification of it, the pinned coordinator
// leaf included, run while the enrollment does; the messages and their
// order on each connection are those of enrolling first and reconnecting
// after, so a join pays about one handshake's latency instead of two.
func Authenticate(raw *net.UnixConn, paths domain.Paths, profile string) (*Conn, error) {
	return AuthenticateWith(raw, paths, profile, nil)
}

// AuthenticateWith is Authenticate with the enrollment key of keys (from
// PrepareKeys; nil: a key generated here). keys is used up: it enrolls once.
func AuthenticateWith(raw *net.UnixConn, paths domain.Paths, profile string, keys *Keys) (*Conn, error) {
	return authenticate(raw, paths, profile, keys, enrollTimeout)
}

// authenticate is AuthenticateWith with bound, the time the coordinator
// has to enroll this client and complete the authenticated handshake.
func authenticate(raw *net.UnixConn, paths domain.Paths, profile string, keys *Keys, bound time.Duration) (*Conn, error) {
	pub, id, err := ReadPublication(paths, profile)
	if err != nil {
		raw.Close()
		return nil, err
	}
	if keys == nil {
		keys = newKeys()
	}
	key, csr, err := keys.take()
	if err != nil {
		raw.Close()
		return nil, err
	}
	cfg, err := trust.ClientTLSConfig(pub, nil, nil)
	if err != nil {
		raw.Close()
		return nil, err
	}
	enrollConn := tls.Client(raw, cfg)
	defer enrollConn.Close()
	enrollConn.SetDeadline(time.Now().Add(bound))

	// The authenticated connection, its handshake waiting for the leaf.
	raw2, err := Dial(paths)
	if err != nil {
		return nil, err
	}
	cfg2, err := trust.ClientTLSConfig(pub, nil, nil)
	if err != nil {
		raw2.Close()
		return nil, err
	}
	// Raw non-blocking socket I/O: a session's output arrives in thousands
	// of reads a second (package rawio says why that matters).
	rconn, err := rawio.NewConn(raw2)
	if err != nil {
		raw2.Close()
		return nil, err
	}
	leaf := make(chan *tls.Certificate, 1) // nil: the enrollment failed
	cfg2.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c := <-leaf; c != nil {
			return c, nil
		}
		return nil, errEnrollmentFailed
	}
	conn := tls.Client(rconn, cfg2)
	conn.SetDeadline(time.Now().Add(bound))
	handshake := make(chan error, 1)
	go func() { handshake <- conn.Handshake() }()
	abandon := func(err error) (*Conn, error) {
		leaf <- nil
		<-handshake
		conn.Close()
		return nil, err
	}

	fc := control.NewConn(enrollConn)
	if err := fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Enroll{Enroll: &lv1.EnrollRequest{CsrDer: csr}}}); err != nil {
		return abandon(enrollFailure(err, raw, profile, bound))
	}
	var f lv1.ServerFrame
	if err := fc.Read(&f); err != nil {
		return abandon(enrollFailure(err, raw, profile, bound))
	}
	if e := f.GetError(); e != nil {
		return abandon(frameError(e))
	}
	en := f.GetEnrollment()
	if en == nil {
		return abandon(errdefs.New(errdefs.ErrCorrupt, "the Host Coordinator answered enrollment with %v", f.String()))
	}
	cert := trust.ClientCertificate(key, &trust.Enrollment{ClientID: en.ClientCliId, CertDER: en.CertificateDer})
	leaf <- &cert
	if err := <-handshake; err != nil {
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, unresponsive(raw, profile, bound)
		}
		if peerGone(err) {
			// The coordinator closed the connection unread after it
			// enrolled this client: it is tearing down, as when the
			// Domain's last session left just now. Like a failed
			// enrollment, that is a Domain no longer published (Run
			// starts or joins again); a TLS refusal is not.
			return nil, fmt.Errorf("TLS with the Host Coordinator: %w (%v)", ErrNotPublished, err)
		}
		return nil, errdefs.Mark(fmt.Errorf("TLS with the Host Coordinator: %w", err), errdefs.ErrRefused)
	}
	conn.SetDeadline(time.Time{})
	return &Conn{conn: conn, fc: control.NewConn(conn), Identity: id, ClientID: en.ClientCliId}, nil
}

// enrollFailure is the error of an enrollment whose exchange failed with
// err: a coordinator that did not answer in time is unresponsive; one that
// closed the connection is tearing down (ErrNotPublished: Run starts or
// joins again).
func enrollFailure(err error, raw *net.UnixConn, profile string, bound time.Duration) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return unresponsive(raw, profile, bound)
	}
	return fmt.Errorf("enroll with the Host Coordinator: %w", ErrNotPublished)
}

// unresponsive is the error for the coordinator at the other end of raw
// (still open: its pid is read only now, off the start-up's path) that
// accepted the connection but did not answer within bound: stopped
// (SIGSTOP, a debugger) or hung. It is not ErrNotPublished: the Domain is
// up, and waiting for it or starting another would not help.
func unresponsive(raw *net.UnixConn, profile string, bound time.Duration) error {
	return errdefs.Mark(&UnresponsiveError{PID: trusteddir.PeerPID(raw), Profile: profile, Bound: bound}, errdefs.ErrUnavailable)
}

// UnresponsiveError is a Domain's coordinator that accepted a control
// connection but did not answer within Bound.
type UnresponsiveError struct {
	PID     int // the coordinator's, 0 if unknown
	Profile string
	Bound   time.Duration
}

func (e *UnresponsiveError) Error() string {
	who, resume := "the Domain's Host Coordinator", ""
	if e.PID > 0 {
		who = fmt.Sprintf("the Domain's Host Coordinator (pid %d)", e.PID)
		resume = fmt.Sprintf("`kill -CONT %d` resumes it if it was stopped; ", e.PID)
	}
	return fmt.Sprintf("%s accepted the connection but did not answer within %s: it is stopped or hung; %s`lazaret logs -p %s` has its last records", who, e.Bound, resume, e.Profile)
}

// Keys is a Client CLI's fresh in-memory enrollment key and its signed
// certificate request, for one enrollment. Generating them is the CLI's
// costliest step before it can enroll: in a fresh process the first key
// also sets up the signature code's tables, and checking the request sets
// up the verification the publication's check needs next. PrepareKeys
// runs that concurrently with the CLI's other start-up work (host checks,
// configuration, workspace).
type Keys struct {
	done chan struct{}
	key  ed25519.PrivateKey
	csr  []byte
	err  error
}

// PrepareKeys starts generating a key and its certificate request; pass
// the result to AuthenticateWith (or Starter.Keys).
func PrepareKeys() *Keys {
	k := &Keys{done: make(chan struct{})}
	go k.generate()
	return k
}

func newKeys() *Keys {
	k := &Keys{done: make(chan struct{})}
	k.generate()
	return k
}

func (k *Keys) generate() {
	defer close(k.done)
	if k.key, k.err = trust.NewClientKey(nil); k.err != nil {
		return
	}
	if k.csr, k.err = trust.NewCSR(k.key); k.err != nil {
		return
	}
	req, err := x509.ParseCertificateRequest(k.csr)
	if err == nil {
		err = req.CheckSignature()
	}
	if err != nil {
		k.err = fmt.Errorf("check the certificate request: %w", err)
	}
}

// take waits for the key and request; they are for one enrollment only.
func (k *Keys) take() (ed25519.PrivateKey, []byte, error) {
	<-k.done
	key, csr, err := k.key, k.csr, k.err
	k.key, k.csr = nil, nil
	if err == nil && key == nil {
		err = errors.New("enrollment keys used twice")
	}
	return key, csr, err
}

// errEnrollmentFailed ends the authenticated connection's handshake when
// the enrollment it waits for failed (the enrollment's error is returned).
var errEnrollmentFailed = errors.New("enrollment failed")

// peerGone reports whether err is the peer closing the connection (end of
// stream, reset, broken pipe) rather than a TLS alert.
func peerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// frameError is the error an Error frame reports, in its category.
func frameError(e *lv1.Error) error {
	return errdefs.Mark(errors.New(e.Message), errdefs.FromCategory(e.Category))
}

// request sends the one request of a status or stop connection and reads
// its answer; an Error frame is returned as its error.
func (c *Conn) request(m *lv1.ClientFrame) (*lv1.ServerFrame, error) {
	if err := c.fc.Write(m); err != nil {
		return nil, err
	}
	var f lv1.ServerFrame
	if err := c.fc.Read(&f); err != nil {
		return nil, err
	}
	if e := f.GetError(); e != nil {
		return nil, frameError(e)
	}
	return &f, nil
}
