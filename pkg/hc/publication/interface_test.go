package publication

import (
	"errors"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/store/storetest"
)

// The publication role takes no Runtime Supervisor message: the
// coordinator calls Commit after SandboxReady committed the sandbox (the
// sandbox role's test drives that message), so these tests drive the
// role through its interface only.

// TestOutOfStateRefused: Commit before Begin bound the control socket,
// a second Commit of a committed publication, and Commit after Withdraw
// and Release are refused with an error that says why, leaving the
// record as it was.
func TestOutOfStateRefused(t *testing.T) {
	e := newRole(t)
	if err := e.sandbox(participant.Committed); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err == nil || !strings.Contains(err.Error(), "control socket") {
		t.Fatalf("Commit before Begin: %v", err)
	}
	if ph, _ := e.phase(t); ph != "" {
		t.Fatalf("a refused Commit recorded the publication: %s", ph)
	}
	if err := e.s.Begin(doc{}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err != nil {
		t.Fatal(err)
	}
	_, before := e.phase(t)
	if err := e.st.Update(e.s.Commit); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("second Commit: %v", err)
	}
	if ph, p := e.phase(t); ph != participant.Committed || !p.Updated.Equal(before.Updated) {
		t.Fatalf("a refused second Commit changed the record: %s", ph)
	}
	e.s.Withdraw()
	if err := e.s.Release("teardown"); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err == nil {
		t.Fatal("Commit after Withdraw and Release accepted")
	}
	if ph, _ := e.phase(t); ph != participant.Clean {
		t.Fatalf("after the refused late Commit: %s", ph)
	}
}

// TestRecoverDeadGenerationReopened: the coordinator died with its
// publication Committed; the next coordinator (the store reopened) cleans
// it with the runtime-absence proof (its socket and file went with it: a
// publication names no process), and a second recovery has nothing to do.
func TestRecoverDeadGenerationReopened(t *testing.T) {
	e := newRole(t)
	if err := e.s.Begin(doc{}); err != nil {
		t.Fatal(err)
	}
	if err := e.sandbox(participant.Committed); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err != nil {
		t.Fatal(err)
	}
	e.s.Withdraw()
	e.st = storetest.Reopen(t, e.st, e.dir, e.lock)
	if err := Clean(e.st, 1, "bootstrap recovery"); err != nil {
		t.Fatal(err)
	}
	ph, p := e.phase(t)
	if ph != participant.Clean || p.Snapshot.GetPublication().GetControlSocket() != nil {
		t.Fatalf("after recovery: %s %v", ph, p.Snapshot)
	}
	if err := Clean(e.st, 1, "bootstrap recovery"); err != nil {
		t.Fatalf("second recovery: %v", err)
	}
}

// TestRecoverNewerRecordRefused: a publication record a newer build wrote
// is refused (ErrRefused, naming its record version) and stays as it is.
func TestRecoverNewerRecordRefused(t *testing.T) {
	e := newRole(t)
	if err := e.s.Begin(doc{}); err != nil {
		t.Fatal(err)
	}
	if err := e.sandbox(participant.Committed); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Update(e.s.Commit); err != nil {
		t.Fatal(err)
	}
	e.s.Withdraw()
	e.st = storetest.NewerParticipant(t, e.st, e.dir, e.lock, 1, participant.Publication)
	if err := Clean(e.st, 1, "bootstrap recovery"); !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "record_version") {
		t.Fatalf("recovery of a newer record: %v", err)
	}
	if err := e.st.View(func(tx *store.Tx) error { _, err := tx.Participant(1, participant.Publication); return err }); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("the newer record was rewritten: %v", err)
	}
}
