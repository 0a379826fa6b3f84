package hc

import (
	"context"
	"io"
	"log/slog"
	"testing"
)

// TestTerminalRecordOrder (FR-15): the Session Terminal record moves
// Intent → Running → ReleaseIntent → Clean only, keeping its identities.
func TestTerminalRecordOrder(t *testing.T) {
	ctx := context.Background()
	m := newMemoryTerminals(slog.New(slog.NewTextHandler(io.Discard, nil)))
	id := TerminalIdentity{SessionID: "s1", Generation: 3, GuestLeaderPID: 9, GuestPGID: 9, GuestLeaderStart: 77}
	// Running, release or clean before intent are refused.
	if m.RecordRunning(ctx, id) == nil || m.RecordReleaseIntent(ctx, "s1") == nil || m.RecordClean(ctx, "s1") == nil {
		t.Fatal("transition before intent accepted")
	}
	if err := m.RecordIntent(ctx, "s1", 3); err != nil {
		t.Fatal(err)
	}
	if m.RecordIntent(ctx, "s1", 3) == nil {
		t.Error("second intent accepted")
	}
	if m.RecordClean(ctx, "s1") == nil {
		t.Error("clean straight from intent accepted")
	}
	bad := id
	bad.GuestPGID = 8
	if m.RecordRunning(ctx, bad) == nil {
		t.Error("leader that is not its group's leader accepted")
	}
	bad = id
	bad.Generation = 4
	if m.RecordRunning(ctx, bad) == nil {
		t.Error("generation change accepted")
	}
	if err := m.RecordRunning(ctx, id); err != nil {
		t.Fatal(err)
	}
	if m.phase("s1") != TerminalRunning {
		t.Errorf("phase %v", m.phase("s1"))
	}
	if err := m.RecordReleaseIntent(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if m.rec["s1"].id != id {
		t.Error("release intent lost the identities")
	}
	if m.RecordRunning(ctx, id) == nil {
		t.Error("release intent back to running accepted")
	}
	if err := m.RecordClean(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if m.phase("s1") != TerminalNone {
		t.Error("clean record retained")
	}
	// Failure before Running: Intent → ReleaseIntent → Clean.
	m.RecordIntent(ctx, "s2", 1)
	if err := m.RecordReleaseIntent(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if err := m.RecordClean(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
}
