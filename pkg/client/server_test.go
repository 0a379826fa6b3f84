package client

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/trust"
)

// coordinator is an in-process control server for the tests: the real
// generation Trust Anchor, its publication, mutual TLS and framing, as the
// Host Coordinator serves them; what it answers after the first frame is
// the test's handler.
type coordinator struct {
	t      testing.TB
	paths  domain.Paths
	roots  domain.Roots
	anchor *trust.Anchor
	ln     *net.UnixListener
	serve  handler
	wg     sync.WaitGroup
	// stopAfterEnroll makes the coordinator stop serving once it has
	// answered an enrollment: later connections, and those whose handshake
	// ends after it, are closed unread, as a coordinator tearing down does.
	stopAfterEnroll bool
	stopping        atomic.Bool
}

// handler serves an authenticated connection after its first frame.
type handler func(a *trust.Anchor, fc *control.Conn, first *lv1.ClientFrame, client *trust.ClientIdentity)

const testProfile = "default"

// newRoots makes a Storage Root and runtime root for uid (the caller's).
func newRoots(t testing.TB) domain.Roots {
	t.Helper()
	// Short: the control socket's path must fit sun_path.
	base, err := os.MkdirTemp("", "lzc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	r := domain.Roots{Storage: filepath.Join(base, "s"), Runtime: filepath.Join(base, "r")}
	for _, d := range []string{r.Storage, r.Runtime} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// storeIdentity writes the Domain's stored identity as the coordinator
// does (domain.json).
func storeIdentity(t testing.TB, paths domain.Paths, profile, workspace string) {
	t.Helper()
	if err := os.MkdirAll(paths.DomainRoot, 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(domain.StoredIdentity{Profile: profile, Workspace: workspace})
	if err := os.WriteFile(filepath.Join(paths.DomainRoot, "domain.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// startCoordinator publishes a generation of the Domain of workspace under
// roots and serves its control socket until the test ends.
func startCoordinator(t testing.TB, roots domain.Roots, workspace string, serve handler) *coordinator {
	t.Helper()
	paths, err := domain.PathsFor(roots, domain.DeriveID(testProfile, workspace))
	if err != nil {
		t.Fatal(err)
	}
	storeIdentity(t, paths, testProfile, workspace)
	a, err := trust.NewAnchor(trust.GenerationIdentity{
		DomainID: string(paths.ID), Generation: 3, CoordinatorID: strings.Repeat("c", 32),
		Profile: testProfile, ConfigFingerprint: "sha256:" + strings.Repeat("f", 64),
	}, strings.Repeat("5", 32), trust.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(paths.RuntimeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	pub, _ := json.Marshal(a.Publication())
	if err := os.WriteFile(paths.Publication(), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: paths.ControlSocket(), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := &coordinator{t: t, paths: paths, roots: roots, anchor: a, ln: ln, serve: serve}
	cfg, err := a.ServerTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer conn.Close()
				if c.stopping.Load() {
					return
				}
				c.conn(tls.Server(conn, cfg))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); c.wg.Wait() })
	return c
}

func (c *coordinator) conn(tconn *tls.Conn) {
	if err := tconn.Handshake(); err != nil || c.stopping.Load() {
		return
	}
	fc := control.NewConn(tconn)
	client, err := c.anchor.Authenticated(tconn.ConnectionState())
	if errors.Is(err, trust.ErrEnrollmentOnly) {
		var f lv1.ClientFrame
		if fc.Read(&f) != nil || f.GetEnroll() == nil {
			return
		}
		e, err := c.anchor.Enroll(f.GetEnroll().CsrDer)
		if err != nil {
			fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Error{Error: &lv1.Error{Category: "refused", Message: err.Error()}}})
			return
		}
		c.stopping.Store(c.stopAfterEnroll)
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Enrollment{Enrollment: &lv1.Enrollment{CertificateDer: e.CertDER, ClientCliId: e.ClientID}}})
		return
	}
	if err != nil {
		return
	}
	var first lv1.ClientFrame
	if fc.Read(&first) != nil {
		return
	}
	c.serve(c.anchor, fc, &first, client)
}
