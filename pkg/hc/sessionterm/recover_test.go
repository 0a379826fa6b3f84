package sessionterm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/participant"
	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
	"github.com/lazaret/lazaret/pkg/store/storetest"
)

// The Session Terminal role takes no Runtime Supervisor message (the
// terminal talks to the CLI and runsc, never to RS): its recovery is
// tested through Recover, with the store reopened as the next coordinator
// opens it.

// TestRecoverNewerRecordRefused: a dead generation with one Session
// Terminal record a newer build wrote is refused as a whole, naming the
// record version: no exec client is matched, no record of the generation
// is cleaned (the unreadable one may name what the others share), and the
// newer record stays as it is. Once it is gone nothing is left behind.
func TestRecoverNewerRecordRefused(t *testing.T) {
	s, root, lock := openStoreIn(t)
	startGeneration(t, s, 1)
	ctx := context.Background()
	r := StoreRecorder{Store: s, Generation: 1, Coordinator: hcProc}
	for _, id := range []string{"newer", "other"} {
		run := runningIdentity(id)
		for _, err := range []error{r.RecordIntent(ctx, id, 1), r.RecordStaged(ctx, id, run.ExecClient), r.RecordRunning(ctx, run)} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	s = storetest.NewerSessionTerminal(t, s, root, lock, 1, "newer")
	refusals := Recover(s, 1, func(pidfs.Identity) error {
		t.Error("an exec client was matched beside an unreadable record")
		return nil
	})
	if len(refusals) != 1 || !strings.Contains(refusals[0], "record_version") {
		t.Fatalf("refusals %q, want the newer record's", refusals)
	}
	wantPhase(t, s, 1, "other", participant.Running)
	if err := s.View(func(tx *store.Tx) error { _, err := tx.SessionTerminal(1, "newer"); return err }); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("the newer record was rewritten: %v", err)
	}
}

// TestRecoverReopened: the next coordinator (the store reopened) retains
// a Running record whose exec client is not proven absent, with its
// identities, and cleans it once it is.
func TestRecoverReopened(t *testing.T) {
	s, root, lock := openStoreIn(t)
	startGeneration(t, s, 1)
	ctx := context.Background()
	r := StoreRecorder{Store: s, Generation: 1, Coordinator: hcProc}
	run := runningIdentity("s1")
	for _, err := range []error{r.RecordIntent(ctx, "s1", 1), r.RecordStaged(ctx, "s1", run.ExecClient), r.RecordRunning(ctx, run)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	s = storetest.Reopen(t, s, root, lock)
	alive := errors.New("still alive after SIGKILL")
	if refusals := Recover(s, 1, func(pidfs.Identity) error { return alive }); len(refusals) != 1 || !strings.Contains(refusals[0], "still alive") {
		t.Fatalf("refusals %q", refusals)
	}
	if st := wantPhase(t, s, 1, "s1", participant.Running); st.View.Slots["exec_client"].Identity != execProc {
		t.Fatalf("retained record lost its exec client: %v", st.View.Slots)
	}
	if refusals := Recover(s, 1, func(pidfs.Identity) error { return nil }); len(refusals) != 0 {
		t.Fatalf("refusals %q", refusals)
	}
	wantPhase(t, s, 1, "s1", participant.Clean)
}
