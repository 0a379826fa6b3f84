// Package supervisortest is a fake Runtime Supervisor for unit tests of
// the Host Coordinator's orchestration and its role drivers. It speaks
// RS's side of the HC↔RS channel over a real SEQPACKET socketpair
// (package fdpass), so the coordinator's end is the same Channel type it
// uses in production; the test scripts what RS sends (hello, artifact
// ready, anchors mounted, staged ownership, ready, stopped, failure) and
// asserts what the coordinator sends back, without runsc.
package supervisortest

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/trust"
)

// DefaultWait bounds how long Expect waits for the coordinator's next
// message.
const DefaultWait = 10 * time.Second

// Supervisor is the RS end of one HC↔RS channel.
type Supervisor struct {
	t testing.TB
	// HC is the coordinator's end, handed to the code under test.
	HC *fdpass.Channel
	rs *fdpass.Channel
}

// New creates a connected channel pair; both ends are closed when the
// test ends.
func New(t testing.TB) *Supervisor {
	t.Helper()
	hc, peer, err := fdpass.Pair()
	if err != nil {
		t.Fatalf("supervisortest: socketpair: %v", err)
	}
	fd, err := unix.Dup(int(peer.Fd()))
	peer.Close()
	if err != nil {
		hc.Close()
		t.Fatalf("supervisortest: dup: %v", os.NewSyscallError("dup", err))
	}
	rs, err := fdpass.FromFD(fd)
	if err != nil {
		unix.Close(fd)
		hc.Close()
		t.Fatalf("supervisortest: adopt RS end: %v", err)
	}
	s := &Supervisor{t: t, HC: hc, rs: rs}
	t.Cleanup(func() { s.rs.Close(); s.HC.Close() })
	return s
}

// Send sends m as RS would.
func (s *Supervisor) Send(m *lv1.SupervisorMessage) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWait)
	defer cancel()
	if err := s.rs.Send(ctx, m); err != nil {
		s.t.Fatalf("supervisortest: send %T: %v", m.GetMsg(), err)
	}
}

// Hello sends SupervisorHello.
func (s *Supervisor) Hello(h *lv1.SupervisorHello) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Hello{Hello: h}})
}

// ArtifactReady reports the prepared artifact RS holds.
func (s *Supervisor) ArtifactReady(a *lv1.ArtifactReady) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Artifact{Artifact: a}})
}

// AnchorsMounted reports the State Anchor mounts RS created.
func (s *Supervisor) AnchorsMounted(m *lv1.AnchorsMounted) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_AnchorsMounted{AnchorsMounted: m}})
}

// Staged reports staged process ownership.
func (s *Supervisor) Staged(o *lv1.StagedProcessOwnership) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Staged{Staged: o}})
}

// Sign signs o with RS's credential key as RS does (over its signing
// payload, Signature unset) and returns it.
func Sign(key ed25519.PrivateKey, o *lv1.StagedProcessOwnership) (*lv1.StagedProcessOwnership, error) {
	o.Signature = nil
	payload, err := fdpass.SigningPayload(o)
	if err != nil {
		return nil, err
	}
	o.Signature = trust.Sign(key, trust.RecordStagedProcessOwnership, payload)
	return o, nil
}

// Ready reports SandboxReady.
func (s *Supervisor) Ready(r *lv1.SandboxReady) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Ready{Ready: r}})
}

// Progress sends a progress line.
func (s *Supervisor) Progress(line string) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Progress{Progress: &lv1.Progress{Message: line}}})
}

// Failure reports a supervisor failure.
func (s *Supervisor) Failure(f *lv1.SupervisorFailure) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Failure{Failure: f}})
}

// Stopped reports SupervisorStopped with the anchor mounts RS verified
// and unmounted.
func (s *Supervisor) Stopped(unmounted ...uint64) {
	s.t.Helper()
	s.Send(&lv1.SupervisorMessage{Msg: &lv1.SupervisorMessage_Stopped{Stopped: &lv1.SupervisorStopped{AnchorsUnmounted: unmounted}}})
}

// Close closes RS's end, as an exiting or killed RS does.
func (s *Supervisor) Close() { s.rs.Close() }

// Recv returns the coordinator's next message, or an error after wait.
func (s *Supervisor) Recv(wait time.Duration) (*lv1.CoordinatorMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var m lv1.CoordinatorMessage
	if err := s.rs.Recv(ctx, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Expect returns the coordinator's next message, failing the test unless
// it arrives within DefaultWait.
func (s *Supervisor) Expect() *lv1.CoordinatorMessage {
	s.t.Helper()
	m, err := s.Recv(DefaultWait)
	if err != nil {
		s.t.Fatalf("supervisortest: awaiting the coordinator's message: %v", err)
	}
	return m
}

// ExpectLeaseRecorded asserts the next message is LeaseRecorded for
// artifact.
func (s *Supervisor) ExpectLeaseRecorded(artifact string) {
	s.t.Helper()
	m := s.Expect()
	if m.GetLeaseRecorded() == nil || m.GetLeaseRecorded().GetPreparedArtifactId() != artifact {
		s.t.Fatalf("supervisortest: coordinator sent %v, want LeaseRecorded for %s", m, artifact)
	}
}

// ExpectStart asserts the next message is StartSandbox and returns it.
func (s *Supervisor) ExpectStart() *lv1.StartSandbox {
	s.t.Helper()
	m := s.Expect()
	if m.GetStart() == nil {
		s.t.Fatalf("supervisortest: coordinator sent %v, want StartSandbox", m)
	}
	return m.GetStart()
}

// ExpectAck asserts the next message is ProcessOwnershipCommitAck and
// returns it.
func (s *Supervisor) ExpectAck() *lv1.ProcessOwnershipCommitAck {
	s.t.Helper()
	m := s.Expect()
	if m.GetAck() == nil {
		s.t.Fatalf("supervisortest: coordinator sent %v, want ProcessOwnershipCommitAck", m)
	}
	return m.GetAck()
}

// ExpectAckOf asserts the next message is the coordinator's exact echo
// of staged (CausalChildAcquisitionV1 step 6) and returns it; its
// signature is the coordinator's, checked by the caller.
func (s *Supervisor) ExpectAckOf(staged *lv1.StagedProcessOwnership) *lv1.ProcessOwnershipCommitAck {
	s.t.Helper()
	ack := s.ExpectAck()
	want := &lv1.ProcessOwnershipCommitAck{DomainId: staged.DomainId, Generation: staged.Generation, CoordinatorId: staged.CoordinatorId, Slot: staged.Slot, Identity: staged.Identity}
	got := proto.Clone(ack).(*lv1.ProcessOwnershipCommitAck)
	got.Signature = nil
	if !proto.Equal(got, want) {
		s.t.Fatalf("supervisortest: coordinator acknowledged %v, want the exact echo %v", got, want)
	}
	return ack
}

// ExpectNetworkDecision asserts the next message is a NetworkDecision and
// returns it.
func (s *Supervisor) ExpectNetworkDecision() *lv1.NetworkDecision {
	s.t.Helper()
	m := s.Expect()
	if m.GetNetworkDecision() == nil {
		s.t.Fatalf("supervisortest: coordinator sent %v, want NetworkDecision", m)
	}
	return m.GetNetworkDecision()
}

// ExpectStop asserts the next message is StopSandbox.
func (s *Supervisor) ExpectStop() {
	s.t.Helper()
	if m := s.Expect(); m.GetStop() == nil {
		s.t.Fatalf("supervisortest: coordinator sent %v, want StopSandbox", m)
	}
}

// ExpectSilence asserts the coordinator sends nothing for d (a refused
// step must not be acknowledged). A closed coordinator end counts as
// silence.
func (s *Supervisor) ExpectSilence(d time.Duration) {
	s.t.Helper()
	m, err := s.Recv(d)
	if err == nil {
		s.t.Fatalf("supervisortest: coordinator sent %v, want nothing", m)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, fdpass.ErrClosed) {
		s.t.Fatalf("supervisortest: awaiting silence: %v", err)
	}
}

// Equal reports whether two coordinator messages are the same.
func Equal(a, b *lv1.CoordinatorMessage) bool { return proto.Equal(a, b) }
