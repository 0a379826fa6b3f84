package supervisortest

import (
	"context"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// TestRoundTrip: what the fake RS sends arrives at the coordinator's end
// as one typed message, and what the coordinator sends is read and typed.
func TestRoundTrip(t *testing.T) {
	s := New(t)
	s.ArtifactReady(&lv1.ArtifactReady{PreparedArtifactId: "a1"})
	var m lv1.SupervisorMessage
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWait)
	defer cancel()
	if err := s.HC.Recv(ctx, &m); err != nil {
		t.Fatal(err)
	}
	if m.GetArtifact().GetPreparedArtifactId() != "a1" {
		t.Fatalf("coordinator received %v", &m)
	}
	s.ExpectSilence(20 * time.Millisecond)
	want := &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_LeaseRecorded{LeaseRecorded: &lv1.LeaseRecorded{PreparedArtifactId: "a1"}}}
	if err := s.HC.Send(ctx, want); err != nil {
		t.Fatal(err)
	}
	got := s.Expect()
	if !Equal(got, want) {
		t.Fatalf("fake supervisor received %v, want %v", got, want)
	}
	// RS gone: the coordinator's end reads the peer's close.
	s.Close()
	if err := s.HC.Recv(ctx, &m); err == nil {
		t.Fatal("receive after RS closed its end succeeded")
	}
}
