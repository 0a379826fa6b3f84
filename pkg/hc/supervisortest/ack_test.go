package supervisortest

import (
	"crypto/ed25519"
	"runtime"
	"testing"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// TestAckerSignedEcho: what Acker sends arrives as the exact echo, its
// signature verifying under the coordinator's key and not under another.
func TestAckerSignedEcho(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(nil)
	s := New(t)
	o := &lv1.StagedProcessOwnership{DomainId: "d", Generation: 2, CoordinatorId: "c", Slot: "git_routing", Identity: &lv1.PidfsProcessIdentityV1{HostPid: 9}}
	if err := s.Acker(key)(o); err != nil {
		t.Fatal(err)
	}
	if ack := s.ExpectSignedAckOf(pub, o); len(ack.Signature) != ed25519.SignatureSize {
		t.Fatalf("ack %v", ack)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	if err := s.Acker(key)(o); err != nil {
		t.Fatal(err)
	}
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&Supervisor{t: r, HC: s.HC, rs: s.rs}).ExpectSignedAckOf(other, o)
	}()
	<-done
	if !r.failed {
		t.Fatal("an acknowledgement verified under another key")
	}
}

// fatalRecorder records a Fatalf and ends its goroutine, as testing does.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(string, ...any) {
	r.failed = true
	runtime.Goexit()
}
