package escalation

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/audit"
	"github.com/lazaret/lazaret/pkg/config"
	"github.com/lazaret/lazaret/pkg/escalate"
	"github.com/lazaret/lazaret/pkg/escalate/record"
	"github.com/lazaret/lazaret/pkg/modeltrace"
	"github.com/lazaret/lazaret/pkg/proc"
	"github.com/lazaret/lazaret/pkg/proc/proctest"
	"github.com/lazaret/lazaret/pkg/trust"
	"github.com/lazaret/lazaret/pkg/trust/trusttest"
)

// The role is driven here through its interface only: New with a Config
// whose Sessions, Launcher and Model are test doubles of the coordinator
// (the launcher is a real causal broker), signed records written into the
// real mailbox as the sandbox's client writes them, and Routing served by
// a test terminal loop.

func TestMain(m *testing.M) {
	proc.MaybeRunWrapper() // the broker's fallback barrier re-executes the test binary
	if root := os.Getenv(crashRootEnv); root != "" {
		crashCoordinator(root)
	}
	// Model steps are recorded only while tracing is on; the fake Model
	// below keeps them, the file is a sink.
	dir, err := os.MkdirTemp("", "esc-trace")
	if err != nil {
		panic(err)
	}
	if err := modeltrace.Start("hc", func(string) string { return filepath.Join(dir, "trace.jsonl") }); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func randomID() string {
	id, err := trust.NewID(rand.Reader)
	if err != nil {
		panic(err)
	}
	return id
}

// fakeSessions is the coordinator's session table.
type fakeSessions struct {
	mu  sync.Mutex
	all map[string]bool // live sessions: interactive or not
}

func (f *fakeSessions) Session(id string) (live, interactive bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tty, ok := f.all[id]
	return ok, tty
}

func (f *fakeSessions) remove(id string) {
	f.mu.Lock()
	delete(f.all, id)
	f.mu.Unlock()
}

// fakeModel is the coordinator's model-trace seam: it keeps each request's
// recorded actions; a session's key is "key-<id>", attached until detached.
type fakeModel struct {
	sync.Mutex
	sessions *fakeSessions
	detached map[string]bool
	actions  map[string][]string // request ID → actions in order
}

func (m *fakeModel) SessionKey(id string) (string, bool) {
	if live, _ := m.sessions.Session(id); !live {
		return "", false
	}
	return "key-" + id, true
}

func (m *fakeModel) Attached(key string) bool { return !m.detached[key] }

func (m *fakeModel) Emit(facts map[string]string, action string, args ...string) {
	a := action
	if r := facts["refines"]; r != "" {
		a += "[" + r + "]"
	}
	m.actions[args[0]] = append(m.actions[args[0]], a)
}

func (m *fakeModel) of(id string) string {
	m.Lock()
	defer m.Unlock()
	return strings.Join(m.actions[id], ",")
}

// fixture is one generation's escalation service.
type fixture struct {
	t        *testing.T
	e        *Service
	anchor   *trust.Anchor
	sandbox  ed25519.PrivateKey
	sessions *fakeSessions
	model    *fakeModel
	anchors  map[string]*trust.SessionAnchor
	caps     map[string][]byte
	root, ws string
}

func newFixture(t *testing.T, rules ...config.Rule) *fixture {
	return newFixtureAt(t, t.TempDir(), 5, rules...)
}

// newFixtureAt starts generation gen of a Domain whose runtime and Domain
// Root are under root (a second generation reuses the root).
func newFixtureAt(t *testing.T, root string, gen uint64, rules ...config.Rule) *fixture {
	g, err := trusttest.New(gen)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, anchor: g.Anchor, sandbox: g.SandboxKey, sessions: &fakeSessions{all: map[string]bool{}},
		anchors: map[string]*trust.SessionAnchor{}, caps: map[string][]byte{}, root: root, ws: t.TempDir()}
	f.model = &fakeModel{sessions: f.sessions, detached: map[string]bool{}, actions: map[string][]string{}}
	for _, d := range []string{f.domainRoot(), f.runtimeDir(), f.controlMount()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	broker := proctest.SelfBroker(t)
	f.e, err = New(Config{Anchor: g.Anchor, RuntimeDir: f.runtimeDir(), ControlMount: f.controlMount(), DomainRoot: f.domainRoot(),
		Workspace: f.ws, Rules: rules, Sessions: f.sessions, Launcher: broker, Model: f.model})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.e.Close)
	return f
}

func (f *fixture) domainRoot() string   { return filepath.Join(f.root, "d") }
func (f *fixture) runtimeDir() string   { return filepath.Join(f.root, "r") }
func (f *fixture) controlMount() string { return filepath.Join(f.root, "c") }
func (f *fixture) gen() uint64          { return f.anchor.Identity().Generation }

func (f *fixture) reqDir() string { r, _ := f.e.MailboxDirs(); return r }
func (f *fixture) resDir() string { _, r := f.e.MailboxDirs(); return r }

// session registers a session (live unless not; interactive with tty) and
// returns its ID.
func (f *fixture) session(live, tty bool) string {
	an, err := trust.NewSessionAnchor(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	client := &trust.ClientIdentity{ClientID: randomID()}
	capRec, _, err := f.anchor.IssueSessionCapability(an.Registration(f.anchor.Identity(), client.ClientID), client)
	if err != nil {
		f.t.Fatal(err)
	}
	f.anchors[an.SessionID], f.caps[an.SessionID] = an, capRec.Encode()
	if live {
		f.sessions.mu.Lock()
		f.sessions.all[an.SessionID] = tty
		f.sessions.mu.Unlock()
	}
	return an.SessionID
}

func (f *fixture) request(sess string, argv ...string) (*lv1.EscalationRequest, []byte) {
	req := &lv1.EscalationRequest{RequestId: randomID(), DomainId: f.anchor.Identity().DomainID, Generation: f.gen(), SessionCapability: f.caps[sess], Argv: argv}
	b, err := record.Seal(record.KindRequest, req, record.KeySigner(f.sandbox))
	if err != nil {
		f.t.Fatal(err)
	}
	return req, b
}

// put writes a mailbox entry as the sandbox's client does (temporary name,
// rename).
func (f *fixture) put(name string, b []byte) {
	tmp := filepath.Join(f.reqDir(), "."+name)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.reqDir(), name)); err != nil {
		f.t.Fatal(err)
	}
}

// submit puts a signed request of the session and returns it.
func (f *fixture) submit(sess string, argv ...string) *lv1.EscalationRequest {
	req, b := f.request(sess, argv...)
	f.put(req.RequestId+escalate.RequestSuffix, b)
	return req
}

// ack acknowledges the request's chunks up to seq (final: the result too).
func (f *fixture) ack(id string, seq uint64, final bool) {
	b, err := record.Seal(record.KindAck, &lv1.EscalationAck{RequestId: id, Generation: f.gen(), Sequence: seq, Final: final}, record.KeySigner(f.sandbox))
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(fmt.Sprintf("%s.%d-%s%s", id, seq, randomID()[:8], escalate.AckSuffix), b)
}

// cancel puts the requester's signed cancellation.
func (f *fixture) cancel(id string) {
	b, err := record.Seal(record.KindCancellation, &lv1.EscalationCancellation{RequestId: id, Generation: f.gen()}, record.KeySigner(f.sandbox))
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(id+escalate.CancelSuffix, b)
}

// drained waits until the watcher consumed every entry.
func (f *fixture) drained() {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		names, _ := os.ReadDir(f.reqDir())
		if len(names) == 0 {
			time.Sleep(20 * time.Millisecond) // the last entry's handling
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatal("the mailbox watcher did not consume the entries")
}

// openResult reads the request's terminal result if it is published.
func (f *fixture) openResult(id string) *lv1.EscalationResult {
	b, err := os.ReadFile(filepath.Join(f.resDir(), id, escalate.ResultName))
	if err != nil {
		return nil
	}
	var res lv1.EscalationResult
	if err := record.Open(b, record.KindResult, f.anchor.CoordinatorCredential().Claims.PublicKey, &res); err != nil {
		f.t.Fatalf("result: %v", err)
	}
	return &res
}

// result waits for the request's terminal result.
func (f *fixture) result(id string) *lv1.EscalationResult {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if res := f.openResult(id); res != nil {
			return res
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.t.Fatalf("no result for %s", id)
	return nil
}

// collect is the requester's client: it reads the chunks in order,
// acknowledges each, and returns the output and the result once it
// arrived and every chunk it counts was read (the final ack then lets the
// service remove the result directory).
func (f *fixture) collect(id string) (stdout, stderr string, res *lv1.EscalationResult) {
	f.t.Helper()
	var out, errOut strings.Builder
	var seq uint64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res = f.openResult(id)
		progressed := false
		for {
			b, err := os.ReadFile(filepath.Join(f.resDir(), id, escalate.ChunkName(seq+1)))
			if err != nil {
				break
			}
			var c lv1.ResultChunk
			if err := record.Open(b, record.KindChunk, f.anchor.CoordinatorCredential().Claims.PublicKey, &c); err != nil {
				f.t.Fatalf("chunk %d: %v", seq+1, err)
			}
			if c.Stream == lv1.EscalationStream_ESCALATION_STREAM_STDERR {
				errOut.Write(c.Data)
			} else {
				out.Write(c.Data)
			}
			seq++
			progressed = true
		}
		if progressed {
			f.ack(id, seq, false)
		}
		if res != nil && seq >= res.LastSequence {
			f.ack(id, seq, true)
			return out.String(), errOut.String(), res
		}
		time.Sleep(2 * time.Millisecond)
	}
	f.t.Fatalf("request %s: no complete result", id)
	return
}

func (f *fixture) auditEntries() []audit.Entry {
	fh, err := os.Open(filepath.Join(f.domainRoot(), audit.FileName))
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

// events returns the request's audit events in order and its result's
// outcome.
func (f *fixture) events(id string) (events, outcome string) {
	var evs []string
	for _, e := range f.auditEntries() {
		if e.RequestID != id {
			continue
		}
		evs = append(evs, e.Event)
		if e.Event == audit.EventResult {
			outcome = e.Outcome
		}
	}
	return strings.Join(evs, ","), outcome
}

func (f *fixture) noResultDir(id, what string) {
	if _, err := os.Stat(filepath.Join(f.resDir(), id)); err == nil {
		f.t.Errorf("%s: a result directory was created (the request was admitted)", what)
	}
}
