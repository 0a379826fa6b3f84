package publication

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/store"
)

// Config is what the publication role needs from its coordinator.
type Config struct {
	Log *slog.Logger
	// Store is the Domain Store the publication participant is recorded
	// in, for Generation.
	Store      *store.Store
	Generation uint64
	// Fingerprint is the generation's configuration fingerprint.
	Fingerprint string
	// Socket is the control socket's path, File the publication file's.
	Socket, File string
	// TLS is the control socket's server configuration (the generation's
	// Trust Anchor: its leaf, and the client certificates it accepts).
	TLS *tls.Config
	// Now is the time source of the published timestamp; nil means
	// time.Now.
	Now func() time.Time
}

// Service is the generation's publication role.
type Service struct {
	cfg Config

	mu       sync.Mutex
	listener *net.UnixListener
}

// New returns the generation's publication role; nothing is published.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}
}

// Begin writes the publication file (doc, JSON) and then binds the
// control socket. A stale socket of a dead generation is removed first:
// the caller holds the Domain lock.
func (s *Service) Begin(doc any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("publication file: %w", err)
	}
	tmp := s.cfg.File + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("publication file: %w", err)
	}
	if err := os.Rename(tmp, s.cfg.File); err != nil {
		return fmt.Errorf("publication file: %w", err)
	}
	os.Remove(s.cfg.Socket)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.cfg.Socket, Net: "unix"})
	if err != nil {
		return errdefs.Mark(fmt.Errorf("listen on %s: %w", s.cfg.Socket, err), errdefs.ErrUnsupportedHost)
	}
	if err := os.Chmod(s.cfg.Socket, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("control socket mode: %w", err)
	}
	s.mu.Lock()
	s.listener = l
	s.mu.Unlock()
	return nil
}

// Accept waits for the next control connection; it fails once the
// listener is withdrawn (or was never bound).
func (s *Service) Accept() (*net.UnixConn, error) {
	s.mu.Lock()
	l := s.listener
	s.mu.Unlock()
	if l == nil {
		return nil, net.ErrClosed
	}
	return l.AcceptUnix()
}

// Server returns the server side of TLS over an accepted control
// connection, with the control socket's configuration.
func (s *Service) Server(raw net.Conn) *tls.Conn {
	return tls.Server(raw, s.cfg.TLS)
}

// Commit records the publication in tx, the coordinator's one transaction
// of a SandboxReady (pkg/hc): the participant moves Intent →
// Intent{socket, fingerprint} → Committed once the sandbox is Committed
// (in tx or before it); the store refuses it otherwise.
func (s *Service) Commit(tx *store.Tx) error {
	var st unix.Stat_t
	if err := unix.Stat(s.cfg.Socket, &st); err != nil {
		return fmt.Errorf("control socket identity: %w", err)
	}
	sock := &lv1.FileIdentityV1{Dev: uint64(st.Dev), Ino: st.Ino, PathHint: s.cfg.Socket}
	fp := []byte(s.cfg.Fingerprint)
	now := s.cfg.Now().UnixNano()
	snap := func(published *int64) *lv1.RoleSnapshotV1 {
		return &lv1.RoleSnapshotV1{Role: &lv1.RoleSnapshotV1_Publication{Publication: &lv1.PublicationSnapshotV1{ControlSocket: sock, ConfigurationFingerprint: fp, PublishedUnixNano: published}}}
	}
	g := s.cfg.Generation
	if err := tx.PutParticipant(g, participant.Publication, participant.Intent, nil); err != nil {
		return err
	}
	if err := tx.PutParticipant(g, participant.Publication, participant.Intent, snap(nil)); err != nil {
		return err
	}
	return tx.PutParticipant(g, participant.Publication, participant.Committed, snap(&now))
}

// Withdraw closes the listener and removes the publication file (teardown
// withdraws the publication before the keys are dropped), in the reverse
// of Begin's order: a CLI that reaches the socket always finds the
// publication that authenticates it, so one that finds the socket
// answering without a publication is facing a starting coordinator, never
// a withdrawing one (cmd/lazaret/cli lockInactive tells them apart so).
// It does nothing unless Begin bound the socket, and nothing the second
// time.
func (s *Service) Withdraw() {
	s.mu.Lock()
	l := s.listener
	s.listener = nil
	s.mu.Unlock()
	if l == nil {
		return
	}
	l.Close()
	if err := os.Remove(s.cfg.File); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.cfg.Log.Warn("remove publication file", "err", err)
	}
}

// Release records the publication's release once Withdraw removed the
// file and closed the listener.
func (s *Service) Release(detail string) error {
	return Clean(s.cfg.Store, s.cfg.Generation, detail)
}

// ReleaseTx is Release within tx (the teardown records every release
// intent in one transaction).
func (s *Service) ReleaseTx(tx *store.Tx, detail string) error {
	return cleanTx(tx, s.cfg.Generation, detail)
}

// Clean records generation g's publication ReleaseIntent → Clean with the
// runtime-absence proof detail states (teardown after Withdraw, or
// bootstrap recovery of a dead generation). A publication never recorded,
// or already Clean, needs nothing.
func Clean(st *store.Store, g uint64, detail string) error {
	return st.Update(func(tx *store.Tx) error { return cleanTx(tx, g, detail) })
}

func cleanTx(tx *store.Tx, g uint64, detail string) error {
	return tx.ReleaseAndClean(g, participant.Publication, detail, nil)
}
