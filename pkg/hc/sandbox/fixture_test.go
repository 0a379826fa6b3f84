package sandbox

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/hc/supervisortest"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/runsc"
	"github.com/lazaret/lazaret/pkg/store"
)

// fixture is a Service over a real Domain Store in a temporary directory,
// with a runtime directory holding runsc's state directory.
type fixture struct {
	s          *Service
	store      *store.Store
	domain     domain.ID
	self       pidfs.Identity
	runtimeDir string
	dir        string         // the Domain root holding the store
	lock       *os.File       // the Domain lock the store opens with
	rs         pidfs.Identity // what cfg.Supervisor returns
}

func newFixture(t *testing.T, wait time.Duration) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{domain: domain.DeriveID("default", "/w"), runtimeDir: filepath.Join(dir, "run"), dir: dir}
	root := filepath.Join(f.runtimeDir, "runsc")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.Create(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	f.lock = lock
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if f.store, err = store.Open(dir, lock, store.DomainIdentity{ID: f.domain, Profile: "default", CanonicalWorkspace: "/w"}, store.Options{Logger: log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f.self = self.Identity()
	self.Close()
	f.s = New(Config{
		Log: log, Store: f.store, Domain: f.domain, Coordinator: f.self, Runtime: runsc.Runtime{Root: root},
		Supervisor:   func() pidfs.Identity { return f.rs },
		AwaitAbsence: supervisortest.Absence(wait, f.self),
		RecoveryWait: wait,
		Sign:         func(string, []byte) ([]byte, error) { return nil, nil },
		Send:         func(context.Context, *lv1.CoordinatorMessage) error { return nil },
	})
	return f
}
