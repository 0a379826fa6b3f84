package hc

// The coordinator's seam toward the Network Sidecar role (package
// network): what the role needs from the coordinator — the Domain Store,
// the broker that launches the connectivity helper, the signed
// acknowledgement of RS's staged ownership and the Domain's failure on an
// unexpected helper exit — and the network ask, which shares the
// escalation prompt's routing to the asking session's terminal.

import (
	"context"
	"fmt"
	"strings"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/hc/network"
)

// newNetwork creates the generation's network role (nothing starts yet).
func (c *coordinator) newNetwork(sidecarID string) *network.Service {
	return network.New(network.Config{
		Log: c.log, Timing: c.timing, Store: c.store,
		DomainID: c.paths.ID, Generation: c.generation, Profile: c.cfg.profile,
		SidecarID: sidecarID, Hostname: c.cfg.guest.Hostname(),
		RuntimeDir: c.paths.RuntimeDir, LogPath: c.paths.Log(), DenialsPath: c.paths.NetworkDenials(),
		LinkExe:  c.cfg.gitRouteExe,
		Progress: c.addProgress, Launcher: c.broker, Watch: c.failOnUnexpectedExit, Ack: c.ackStaged,
	})
}

// decideNetworkAsk answers the proxy's question about a host outside the
// allowlist: only an interactive session's developer may allow it.
func (c *coordinator) decideNetworkAsk(a *lv1.NetworkAsk) {
	decision := c.askDeveloper(a)
	if err := c.rs.Send(context.Background(), &lv1.CoordinatorMessage{Msg: &lv1.CoordinatorMessage_NetworkDecision{NetworkDecision: &lv1.NetworkDecision{Id: a.Id, Decision: decision}}}); err != nil {
		c.log.Warn("network decision not delivered", "host", a.Host, "err", err)
	}
}

// networkAskTimeout bounds a network ask (the proxy gives up after the
// same time).
const networkAskTimeout = 5 * time.Minute

// askDeveloper puts a network ask to the developer at the asking session's
// terminal, with the escalation prompt's routing: a session without a
// terminal (or an unknown label) is denied without asking. It returns
// "once", "domain" or "deny", audited either way.
func (c *coordinator) askDeveloper(a *lv1.NetworkAsk) string {
	target := fmt.Sprintf("%s:%d", a.Host, a.Port)
	dec := audit.Entry{Event: audit.EventNetworkDecision, Generation: c.generation, Profile: c.cfg.profile.Name, Argv: []string{target}, Reason: "via " + a.Via}
	finish := func(decision, by, reason string) string {
		dec.Decision, dec.DecidedBy = "deny", by
		if decision != "deny" {
			dec.Decision, dec.Reason = "approve", "scope "+decision
		}
		if reason != "" {
			dec.Reason = reason
		}
		c.esc.Audit(dec)
		c.log.Info("network ask decided", "host", target, "session_id", dec.SessionID, "decision", decision, "decided_by", by)
		return decision
	}
	id, ok := strings.CutPrefix(a.Session, "s-")
	c.mu.Lock()
	s, _ := c.sessions.Get(id)
	c.mu.Unlock()
	if !ok || s == nil {
		return finish("deny", "no-session", "the request names no session of this Domain")
	}
	dec.SessionID, dec.ClientID = s.id, s.claims.ClientID
	if !s.tty || c.esc == nil {
		return finish("deny", "no-terminal", "")
	}
	reqID := fmt.Sprintf("net-%d-%d", c.generation, a.Id)
	prompt := &lv1.EscalationPrompt{RequestId: reqID, Profile: c.cfg.profile.Name, SessionId: s.id, Generation: c.generation,
		NetworkHost: a.Host, NetworkPort: a.Port, TimeoutSeconds: uint32(networkAskTimeout / time.Second)}
	d, by, reason := c.esc.Ask(s.id, s.claims.AnchorPublicKey, prompt, networkAskTimeout, 5*time.Second)
	switch {
	case d == nil:
		return finish("deny", by, reason)
	case d.Decision == lv1.DecisionKind_DECISION_KIND_APPROVE && (d.NetworkScope == "once" || d.NetworkScope == "domain"):
		return finish(d.NetworkScope, "developer", "")
	}
	return finish("deny", "developer", "")
}
