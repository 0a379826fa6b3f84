package supervisortest

import (
	"context"
	"crypto/ed25519"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/trust"
)

// Acker returns what a role calls to acknowledge RS's staged ownership
// (its Config.Ack), as the coordinator's ackStaged does: the exact echo,
// signed with the coordinator's key, sent on the coordinator's end.
func (s *Supervisor) Acker(key ed25519.PrivateKey) func(*lv1.StagedProcessOwnership) error {
	return func(o *lv1.StagedProcessOwnership) error {
		ack := &lv1.ProcessOwnershipCommitAck{DomainId: o.DomainId, Generation: o.Generation, CoordinatorId: o.CoordinatorId, Slot: o.Slot, Identity: o.Identity}
		payload, err := fdpass.SigningPayload(ack)
		if err != nil {
			return err
		}
		ack.Signature = trust.Sign(key, trust.RecordProcessOwnershipCommitAck, payload)
		ctx, cancel := context.WithTimeout(context.Background(), DefaultWait)
		defer cancel()
		return s.HC.Send(ctx, &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Ack{Ack: ack}})
	}
}

// ExpectSignedAckOf is ExpectAckOf that also verifies the
// acknowledgement's signature with the coordinator's public key.
func (s *Supervisor) ExpectSignedAckOf(coordinator ed25519.PublicKey, staged *lv1.StagedProcessOwnership) *lv1.ProcessOwnershipCommitAck {
	s.t.Helper()
	ack := s.ExpectAckOf(staged)
	unsigned := proto.Clone(ack).(*lv1.ProcessOwnershipCommitAck)
	unsigned.Signature = nil
	payload, err := fdpass.SigningPayload(unsigned)
	if err != nil {
		s.t.Fatalf("supervisortest: acknowledgement payload: %v", err)
	}
	if err := trust.Verify(coordinator, trust.RecordProcessOwnershipCommitAck, payload, ack.Signature); err != nil {
		s.t.Fatalf("supervisortest: acknowledgement not signed by the coordinator: %v", err)
	}
	return ack
}
