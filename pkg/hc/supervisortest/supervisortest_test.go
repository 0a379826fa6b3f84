package supervisortest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/trust"
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

// TestSignAndAck: a staged report signed by the fake verifies under RS's
// public key as the coordinator checks it, and the coordinator's exact
// echo is accepted.
func TestSignAndAck(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	staged, err := Sign(key, &lv1.StagedProcessOwnership{DomainId: "d", Generation: 3, CoordinatorId: "c", Slot: "attached_runsc",
		Identity: &lv1.PidfsProcessIdentityV1{HostPid: 42}})
	if err != nil {
		t.Fatal(err)
	}
	unsigned := proto.Clone(staged).(*lv1.StagedProcessOwnership)
	unsigned.Signature = nil
	payload, err := fdpass.SigningPayload(unsigned)
	if err != nil {
		t.Fatal(err)
	}
	if err := trust.Verify(pub, trust.RecordStagedProcessOwnership, payload, staged.Signature); err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	unsigned.Slot = "egress_proxy"
	if p, _ := fdpass.SigningPayload(unsigned); trust.Verify(pub, trust.RecordStagedProcessOwnership, p, staged.Signature) == nil {
		t.Fatal("signature verifies over another slot")
	}
	s := New(t)
	ctx := context.Background()
	ack := &lv1.ProcessOwnershipCommitAck{DomainId: "d", Generation: 3, CoordinatorId: "c", Slot: "attached_runsc", Identity: staged.Identity, Signature: []byte("sig")}
	if err := s.HC.Send(ctx, &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Ack{Ack: ack}}); err != nil {
		t.Fatal(err)
	}
	if got := s.ExpectAckOf(staged); string(got.Signature) != "sig" {
		t.Fatalf("ack %v", got)
	}
}
