package hc

import (
	"crypto/ed25519"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/hc/escalation"
	"github.com/lazaret/lazaret/pkg/hc/sessions"
	"github.com/lazaret/lazaret/pkg/trust"
	"github.com/lazaret/lazaret/pkg/trust/trusttest"
)

// escFixture is a coordinator with a live escalation service and no broker
// (any host execution would panic the test) for the terminal loop's tests;
// the role's own tests are in package escalation.
type escFixture struct {
	t       *testing.T
	c       *coordinator
	e       *escalation.Service
	sandbox ed25519.PrivateKey
	anchors map[string]*trust.SessionAnchor
	caps    map[string][]byte
}

func newEscFixture(t *testing.T) *escFixture {
	return newEscFixtureRules(t, []config.Rule{{Argv: []string{"true"}}})
}

// newEscFixtureRules is newEscFixture with the profile's auto_approve rules.
func newEscFixtureRules(t *testing.T, rules []config.Rule) *escFixture {
	g, err := trusttest.New(5)
	if err != nil {
		t.Fatal(err)
	}
	a, id := g.Anchor, g.ID
	root := t.TempDir()
	c := &coordinator{anchor: a, generation: 5, log: slog.New(slog.DiscardHandler), cfg: generationConfig{workspace: t.TempDir(), profileName: "default",
		profile: &config.Profile{Name: "default", AutoApprove: rules}}, sessions: sessions.New[*session](sessions.Config{})}
	c.paths = domain.Paths{ID: domain.ID(id.DomainID), DomainRoot: filepath.Join(root, "d"), RuntimeDir: filepath.Join(root, "r")}
	for _, d := range []string{c.paths.DomainRoot, c.paths.RuntimeDir, c.paths.ControlMountSource()} {
		os.MkdirAll(d, 0o700)
	}
	f := &escFixture{t: t, c: c, sandbox: g.SandboxKey, anchors: map[string]*trust.SessionAnchor{}, caps: map[string][]byte{}}
	if f.e, err = c.newEscalation(); err != nil {
		t.Fatal(err)
	}
	c.esc = f.e
	t.Cleanup(f.e.Close)
	return f
}

// session registers a session (live unless detached) and returns its ID.
func (f *escFixture) session(live bool) string {
	an, err := trust.NewSessionAnchor(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	client := &trust.ClientIdentity{ClientID: randomID()}
	capRec, _, err := f.c.anchor.IssueSessionCapability(an.Registration(f.c.anchor.Identity(), client.ClientID), client)
	if err != nil {
		f.t.Fatal(err)
	}
	f.anchors[an.SessionID], f.caps[an.SessionID] = an, capRec.Encode()
	if live {
		f.c.sessions.Admit(an.SessionID, &session{id: an.SessionID}, 0)
	}
	return an.SessionID
}

func (f *escFixture) request(sess string, argv ...string) (*lv1.EscalationRequest, []byte) {
	req := &lv1.EscalationRequest{RequestId: randomID(), DomainId: f.c.anchor.Identity().DomainID, Generation: 5, SessionCapability: f.caps[sess], Argv: argv}
	b, err := record.Seal(record.KindRequest, req, record.KeySigner(f.sandbox))
	if err != nil {
		f.t.Fatal(err)
	}
	return req, b
}

func (f *escFixture) put(name string, b []byte) {
	hostReq, _ := f.e.MailboxDirs()
	tmp := filepath.Join(hostReq, "."+name)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(hostReq, name)); err != nil {
		f.t.Fatal(err)
	}
}

// result waits for the request's terminal result.
func (f *escFixture) result(id string) *lv1.EscalationResult {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		_, hostRes := f.e.MailboxDirs()
		if b, err := os.ReadFile(filepath.Join(hostRes, id, escalate.ResultName)); err == nil {
			var res lv1.EscalationResult
			if err := record.Open(b, record.KindResult, f.c.anchor.CoordinatorCredential().Claims.PublicKey, &res); err != nil {
				f.t.Fatalf("result: %v", err)
			}
			return &res
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatalf("no result for %s", id)
	return nil
}

func (f *escFixture) auditEntries() []audit.Entry {
	fh, err := os.Open(filepath.Join(f.c.paths.DomainRoot, audit.FileName))
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	es, err := audit.Read(fh, time.Time{})
	if err != nil {
		f.t.Fatal(err)
	}
	return es
}
