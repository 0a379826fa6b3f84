package cli

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/rawio"
	"github.com/lazaret/lazaret/pkg/trust"
	"github.com/lazaret/lazaret/pkg/trusteddir"
)

// publicationFile must match hc.PublicationFile.
const publicationFile = "publication.json"

// errNotPublished means the Domain's coordinator is starting or stopping:
// the caller dials again.
var errNotPublished = errdefs.New(errdefs.ErrUnavailable, "the Domain is not published")

// readPublication reads and verifies the generation's publication in the
// host-private runtime directory and returns it with the generation
// identity its Trust Manifest names.
func readPublication(paths domain.Paths, profile string) (trust.Publication, trust.GenerationIdentity, error) {
	var pub trust.Publication
	d, err := openRuntime(paths)
	if err != nil {
		return pub, trust.GenerationIdentity{}, err
	}
	b, err := d.ReadFile(publicationFile, maxPublication)
	d.Close()
	if errors.Is(err, fs.ErrNotExist) {
		return pub, trust.GenerationIdentity{}, errNotPublished
	}
	if err != nil {
		return pub, trust.GenerationIdentity{}, err
	}
	if err := json.Unmarshal(b, &pub); err != nil {
		return pub, trust.GenerationIdentity{}, errdefs.Mark(fmt.Errorf("publication %s: %w", publicationFile, err), errdefs.ErrCorrupt)
	}
	id, err := pub.VerifiedIdentity(string(paths.ID), profile, time.Now())
	return pub, id, err
}

// maxPublication bounds the publication file (a few KiB).
const maxPublication = 1 << 20

// controlSocket must match the base name of domain.Paths.ControlSocket.
const controlSocket = "control.sock"

// openRuntime opens the Domain's runtime directory only after verifying it
// and the runtime root above it: real directories (never a symlink) owned by
// the developer with mode 0700, each opened beneath the verified descriptor
// of its parent (pkg/trusteddir). A missing one means the Domain is not
// published; anything else is refused with the path and the fix before a
// byte is read or sent.
func openRuntime(paths domain.Paths) (*trusteddir.Dir, error) {
	root, err := trusteddir.OpenPrivate(filepath.Dir(paths.RuntimeDir), os.Getuid())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNotPublished
	}
	if err != nil {
		return nil, fmt.Errorf("runtime root: %w", err)
	}
	defer root.Close()
	d, err := root.OpenPrivate(filepath.Base(paths.RuntimeDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errNotPublished
	}
	if err != nil {
		return nil, fmt.Errorf("Domain runtime directory: %w", err)
	}
	return d, nil
}

// dialControl connects to the Domain's control socket through the verified
// runtime directory and checks that the listener runs as the developer
// (SO_PEERCRED). errNotPublished when nothing listens; a refusal
// (errdefs.ErrRefused) when the directory or the listener is not trusted.
func dialControl(paths domain.Paths) (*net.UnixConn, error) {
	d, err := openRuntime(paths)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	conn, err := d.DialUnix(controlSocket)
	if errors.Is(err, errdefs.ErrRefused) {
		return nil, err
	}
	if err != nil {
		return nil, errNotPublished
	}
	return conn, nil
}

// authenticated is an mTLS control connection and what it is bound to.
type authenticated struct {
	conn     net.Conn
	identity trust.GenerationIdentity
	clientID string
}

// authenticate turns a dialed control connection into an authenticated
// one (spec §3.2): it pins the published coordinator, enrolls a fresh
// in-memory Ed25519 key on this certificate-less connection (the only thing
// such a connection may do), and dials again with the issued one-hour leaf.
func authenticate(raw *net.UnixConn, paths domain.Paths, profile string) (*authenticated, error) {
	pub, id, err := readPublication(paths, profile)
	if err != nil {
		raw.Close()
		return nil, err
	}
	key, err := trust.NewClientKey(nil)
	if err != nil {
		raw.Close()
		return nil, err
	}
	csr, err := trust.NewCSR(key)
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
	enrollConn.SetDeadline(time.Now().Add(10 * time.Second))
	fc := control.NewConn(enrollConn)
	if err := fc.Write(&lv1.ClientFrame{Msg: &lv1.ClientFrame_Enroll{Enroll: &lv1.EnrollRequest{CsrDer: csr}}}); err != nil {
		return nil, fmt.Errorf("enroll with the Host Coordinator: %w", errNotPublished)
	}
	var f lv1.ServerFrame
	if err := fc.Read(&f); err != nil {
		return nil, fmt.Errorf("enroll with the Host Coordinator: %w", errNotPublished)
	}
	if e := f.GetError(); e != nil {
		return nil, errdefs.Mark(errors.New(e.Message), errdefs.FromCategory(e.Category))
	}
	en := f.GetEnrollment()
	if en == nil {
		return nil, errdefs.New(errdefs.ErrCorrupt, "the Host Coordinator answered enrollment with %v", f.String())
	}
	cert := trust.ClientCertificate(key, &trust.Enrollment{ClientID: en.ClientCliId, CertDER: en.CertificateDer})
	raw2, err := dialControl(paths)
	if err != nil {
		return nil, err
	}
	cfg, err = trust.ClientTLSConfig(pub, &cert, nil)
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
	conn := tls.Client(rconn, cfg)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := conn.Handshake(); err != nil {
		conn.Close()
		return nil, errdefs.Mark(fmt.Errorf("TLS with the Host Coordinator: %w", err), errdefs.ErrRefused)
	}
	conn.SetDeadline(time.Time{})
	return &authenticated{conn: conn, identity: id, clientID: en.ClientCliId}, nil
}
