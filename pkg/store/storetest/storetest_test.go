package storetest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// TestNewerRecordsRefused: the rewritten records are the ones named, and
// the reopened store refuses to read them (the newer build's record
// version), while it still reads every other record.
func TestNewerRecordsRefused(t *testing.T) {
	dir := t.TempDir()
	lock, err := os.Create(filepath.Join(dir, store.LockName))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	st, err := store.Open(dir, lock, store.DomainIdentity{ID: domain.DeriveID("default", "/w"), Profile: "default", CanonicalWorkspace: "/w"}, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if err := st.Update(func(tx *store.Tx) error {
		if err := tx.CreateGeneration(store.NewGeneration{Number: 3, ConfigurationFingerprint: []byte("f"), CoordinatorID: "hc", Coordinator: self.Identity()}); err != nil {
			return err
		}
		if err := tx.PutParticipant(3, participant.Sandbox, participant.Intent, nil); err != nil {
			return err
		}
		if err := tx.PutParticipant(3, participant.Helper, participant.Intent, nil); err != nil {
			return err
		}
		return tx.PutSessionTerminal(3, "s1", participant.Intent, nil)
	}); err != nil {
		t.Fatal(err)
	}
	st = NewerParticipant(t, st, dir, lock, 3, participant.Helper)
	st = NewerSessionTerminal(t, st, dir, lock, 3, "s1")
	st = Reopen(t, st, dir, lock)
	err = st.View(func(tx *store.Tx) error { _, err := tx.Participant(3, participant.Helper); return err })
	if !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "record_version 2") {
		t.Fatalf("newer helper record: %v", err)
	}
	err = st.View(func(tx *store.Tx) error { _, err := tx.SessionTerminal(3, "s1"); return err })
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("newer session record: %v", err)
	}
	if err := st.View(func(tx *store.Tx) error { _, err := tx.Participant(3, participant.Sandbox); return err }); err != nil {
		t.Fatalf("the sandbox record was touched: %v", err)
	}
}
