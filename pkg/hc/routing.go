package hc

// The coordinator's seam toward the Git-routing role (package
// gitrouting): the Domain Store, the workspace and Domain paths, the host
// Git configuration guard (gitconfig.go) and the signed acknowledgement of
// RS's staged ownership, which every role RS acquires shares.

import (
	"context"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/fdpass"
	"github.com/lazaret/lazaret/pkg/hc/gitrouting"
	"github.com/lazaret/lazaret/pkg/trust"
)

// newRouting creates the generation's Git-routing role (nothing starts
// yet); guard is what host Git runs or reads from the workspace.
func (c *coordinator) newRouting() *gitrouting.Service {
	return gitrouting.New(gitrouting.Config{
		Log: c.log, Store: c.store, Generation: c.generation, Profile: c.cfg.profile,
		Workspace: c.cfg.workspace, DomainRoot: c.paths.DomainRoot, StateDir: c.paths.IgnoredStateDir(), RoutedWorkspace: c.paths.RoutedWorkspace(), RulesSnapshot: c.paths.GitignoreSnapshot(),
		Progress: c.addProgress, Ack: c.ackStaged,
	})
}

// ackStaged sends the signed exact echo of a staged ownership.
func (c *coordinator) ackStaged(s *lv1.StagedProcessOwnership) error {
	ack := &lv1.ProcessOwnershipCommitAck{DomainId: s.DomainId, Generation: s.Generation, CoordinatorId: s.CoordinatorId, Slot: s.Slot, Identity: s.Identity}
	payload, err := fdpass.SigningPayload(ack)
	if err != nil {
		return err
	}
	if ack.Signature, err = c.anchor.SignAsCoordinator(trust.RecordProcessOwnershipCommitAck, payload); err != nil {
		return err
	}
	return c.rs.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_Ack{Ack: ack}})
}
