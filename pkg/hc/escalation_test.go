package hc

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/trust"
)

// escFixture is a coordinator with a live escalation service and no broker:
// any host execution would panic the test.
type escFixture struct {
	t       *testing.T
	c       *coordinator
	e       *escalations
	sandbox ed25519.PrivateKey
	anchors map[string]*trust.SessionAnchor
	caps    map[string][]byte
}

func newEscFixture(t *testing.T) *escFixture {
	return newEscFixtureRules(t, []config.Rule{{Argv: []string{"true"}}})
}

// newEscFixtureRules is newEscFixture with the profile's auto_approve rules.
func newEscFixtureRules(t *testing.T, rules []config.Rule) *escFixture {
	id := trust.GenerationIdentity{DomainID: string(domain.DeriveID("default", "/p")), Generation: 5, CoordinatorID: randomID(), Profile: "default", ConfigFingerprint: "sha256:" + strings.Repeat("0", 64)}
	a, err := trust.NewAnchor(id, randomID(), trust.Options{})
	if err != nil {
		t.Fatal(err)
	}
	files, err := a.SandboxFiles()
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(files["sandbox.key"])
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	c := &coordinator{anchor: a, generation: 5, log: slog.New(slog.DiscardHandler), ws: t.TempDir(), prof: "default",
		profile: &config.Profile{Name: "default", AutoApprove: rules}, sessions: map[string]*session{}}
	c.paths = domain.Paths{ID: domain.ID(id.DomainID), DomainRoot: filepath.Join(root, "d"), RuntimeDir: filepath.Join(root, "r")}
	for _, d := range []string{c.paths.DomainRoot, c.paths.RuntimeDir, c.paths.ControlMountSource()} {
		os.MkdirAll(d, 0o700)
	}
	f := &escFixture{t: t, c: c, sandbox: k.(ed25519.PrivateKey), anchors: map[string]*trust.SessionAnchor{}, caps: map[string][]byte{}}
	if f.e, err = newEscalations(c); err != nil {
		t.Fatal(err)
	}
	c.esc = f.e
	t.Cleanup(f.e.close)
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
		f.c.sessions[an.SessionID] = &session{id: an.SessionID}
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
	tmp := filepath.Join(f.e.hostReq, "."+name)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.e.hostReq, name)); err != nil {
		f.t.Fatal(err)
	}
}

// drained waits until the watcher consumed every entry.
func (f *escFixture) drained() {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		names, _ := os.ReadDir(f.e.hostReq)
		if len(names) == 0 {
			time.Sleep(20 * time.Millisecond) // the last entry's handling
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatal("the mailbox watcher did not consume the entries")
}

// result waits for the request's terminal result.
func (f *escFixture) result(id string) *lv1.EscalationResult {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(f.e.hostRes, id, escalate.ResultName)); err == nil {
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

func (f *escFixture) noResultDir(id, what string) {
	if _, err := os.Stat(filepath.Join(f.e.hostRes, id)); err == nil {
		f.t.Errorf("%s: a result directory was created (the request was admitted)", what)
	}
}

// TestEscalationMailboxAdversarial: forged signatures, another generation,
// replayed IDs, oversize and truncated records, links, FIFOs and
// directories are each refused with no crash, no admission and no host
// execution; a request of a session that is gone fails; a decision signed
// by another session's anchor is not accepted.
func TestEscalationMailboxAdversarial(t *testing.T) {
	f := newEscFixture(t)
	s1 := f.session(true)
	gone := f.session(false)

	// Forged: signed by a key that is not the sandbox's.
	_, otherKey, _ := ed25519.GenerateKey(nil)
	req, _ := f.request(s1, "true")
	forged, _ := record.Seal(record.KindRequest, req, record.KeySigner(otherKey))
	f.put(req.RequestId+escalate.RequestSuffix, forged)
	// Another generation.
	old, _ := f.request(s1, "true")
	old.Generation = 4
	oldB, _ := record.Seal(record.KindRequest, old, record.KeySigner(f.sandbox))
	f.put(old.RequestId+escalate.RequestSuffix, oldB)
	// Oversize, truncated, a record of another kind under a request name.
	f.put("big"+escalate.RequestSuffix, make([]byte, record.MaxRecordBytes+1))
	trunc, truncB := f.request(s1, "true")
	f.put(trunc.RequestId+escalate.RequestSuffix, truncB[:len(truncB)-10])
	ack, _ := record.Seal(record.KindAck, &lv1.EscalationAck{RequestId: randomID(), Generation: 5}, record.KeySigner(f.sandbox))
	f.put("x"+escalate.RequestSuffix, ack)
	// Links, FIFO, directory, unknown names.
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, truncB, 0o600)
	os.Symlink(secret, filepath.Join(f.e.hostReq, "link"+escalate.RequestSuffix))
	unix.Mkfifo(filepath.Join(f.e.hostReq, "fifo"+escalate.RequestSuffix), 0o600)
	os.Mkdir(filepath.Join(f.e.hostReq, "dir"+escalate.RequestSuffix), 0o700)
	f.put("unknown.kind", []byte("x"))
	f.drained()
	for _, r := range []*lv1.EscalationRequest{req, old, trunc} {
		f.noResultDir(r.RequestId, "refused request")
	}

	// A valid request from a live session without a terminal: denied at
	// once; its replay is refused.
	ok, okB := f.request(s1, "id")
	f.put(ok.RequestId+escalate.RequestSuffix, okB)
	if res := f.result(ok.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_DENIED || !strings.Contains(res.Reason, "no terminal") {
		t.Errorf("no-terminal request: %v", res)
	}
	f.put("replay"+escalate.RequestSuffix, okB)
	f.drained()
	// A request of a session that is not attached fails.
	g, gB := f.request(gone, "true")
	f.put(g.RequestId+escalate.RequestSuffix, gB)
	if res := f.result(g.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED {
		t.Errorf("request of a gone session: %v", res)
	}

	// A decision signed by another session's anchor is refused.
	port := f.e.attachTerminal(s1)
	other := f.session(true)
	p, pB := f.request(s1, "rm", "-rf", "/")
	f.put(p.RequestId+escalate.RequestSuffix, pB)
	var ask *promptAsk
	select {
	case ask = <-port.asks:
	case <-time.After(20 * time.Second):
		t.Fatal("no prompt for the session's request")
	}
	if ask.prompt.SessionId != s1 || ask.prompt.RequestId != p.RequestId || strings.Join(ask.prompt.Argv, " ") != "rm -rf /" {
		t.Errorf("prompt: %v", ask.prompt)
	}
	sd, _ := record.SignDecision(&lv1.DeveloperDecision{RequestId: p.RequestId, SessionId: s1, Generation: 5, Decision: lv1.DecisionKind_DECISION_KIND_APPROVE, ApprovedArgv: p.Argv},
		func(n string, b []byte) ([]byte, error) { return f.anchors[other].Sign(n, b), nil })
	ask.answer <- sd
	if res := f.result(p.RequestId); res.Outcome != lv1.EscalationOutcome_ESCALATION_OUTCOME_FAILED {
		t.Errorf("decision by another anchor: %v", res)
	}

	var refused, executed int
	for _, e := range f.auditEntries() {
		switch e.Event {
		case audit.EventRefused:
			refused++
		case audit.EventExecute:
			executed++
		}
	}
	if refused < 10 || executed != 0 {
		t.Errorf("audit: %d refusals (want ≥ 10), %d executions (want 0)", refused, executed)
	}
}

// TestEscalationFlood: 10,000 forged requests are each refused with bounded
// memory and nothing admitted.
func TestEscalationFlood(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("-short: the flood of forged requests is long; make unit runs it")
	}
	f := newEscFixture(t)
	s1 := f.session(true)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	req, _ := f.request(s1, "true")
	forged, _ := record.Seal(record.KindRequest, req, record.KeySigner(otherKey))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 10000; i++ {
		f.put(randomID()+escalate.RequestSuffix, forged)
	}
	f.drained()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grow := int64(after.HeapInuse) - int64(before.HeapInuse); grow > 32<<20 {
		t.Errorf("heap grew by %d bytes after 10,000 refused requests", grow)
	}
	if ents, _ := os.ReadDir(f.e.hostRes); len(ents) != 0 {
		t.Errorf("%d requests admitted", len(ents))
	}
	if n := len(f.e.seen); n != 0 {
		t.Errorf("%d forged IDs remembered", n)
	}
}
