package hc

import (
	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/netpolicy"
	"github.com/lazaret/lazaret/pkg/store"
)

// statusDocument is the Domain's state for `lazaret status`.
func (c *coordinator) statusDocument() *lv1.DomainStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	states := map[state]string{stateStarting: "starting", stateRunning: "running", stateFailed: "failed", stateStopping: "stopping"}
	doc := &lv1.DomainStatus{
		DomainId: proto.String(string(c.paths.ID)), Profile: proto.String(c.cfg.profileName), Workspace: proto.String(c.cfg.workspace),
		Generation: proto.Uint64(c.generation), State: proto.String(states[c.st]), CoordinatorId: proto.String(c.cfg.coordinatorID),
		ConfigurationFingerprint: proto.String(c.cfg.profile.Fingerprint()), ContainerId: proto.String(c.sb.Container()),
		Image: proto.String(c.cfg.image),
	}
	for _, id := range c.sessions.IDs() {
		doc.Sessions = append(doc.Sessions, &lv1.SessionStatus{SessionId: proto.String(id)})
	}
	if c.failErr != nil && c.st == stateFailed {
		doc.Failure = proto.String(c.failErr.Error())
	}
	if l := c.sessions.Linger(); l > 0 {
		doc.LingerMs = proto.Int64(l.Milliseconds())
	}
	if left, ok := c.sessions.LingerLeft(); ok && c.st == stateRunning {
		doc.LingerLeftMs = proto.Int64(left.Milliseconds())
	}
	for _, r := range c.recovery.records() {
		doc.Retained = append(doc.Retained, &lv1.RetainedRecord{Generation: proto.Uint64(r.Generation), Record: proto.String(r.Record), Reason: proto.String(r.Reason)})
	}
	if c.store != nil {
		parts := map[string]string{}
		c.store.View(func(tx *store.Tx) error {
			ps, err := tx.Participants(c.generation)
			for _, p := range ps {
				parts[string(p.Role)] = string(p.Phase)
			}
			return err
		})
		doc.Participants = parts
	}
	if rs := c.rs.Child(); rs != nil {
		doc.RuntimeSupervisor = proto.String(rs.Identity().String())
	}
	if c.sb != nil {
		if staged := c.sb.StagedRunsc(); staged != nil {
			doc.AttachedRunscPid = proto.Uint32(staged.Identity.GetHostPid())
		}
		if r := c.sb.Ready(); r != nil {
			doc.PreparedArtifact = proto.String(r.PreparedArtifactId)
			doc.Routes = netpolicy.DisplayRoutes(r.ObservedRoutes)
		}
	}
	doc.NetworkPolicyDigest = proto.String(c.net.PolicyDigestString())
	doc.Network = c.net.Status()
	return doc
}
