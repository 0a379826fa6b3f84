package client

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/control"
	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/egress"
	"github.com/lazaret/lazaret/pkg/trust"
)

// running is a representative running Domain's document.
func running(ws string) *lv1.DomainStatus {
	return &lv1.DomainStatus{
		DomainId: proto.String(string(domain.DeriveID(testProfile, ws))), Profile: proto.String(testProfile), Workspace: proto.String(ws),
		Generation: proto.Uint64(3), State: proto.String("running"), CoordinatorId: proto.String(strings.Repeat("c", 32)),
		ConfigurationFingerprint: proto.String("sha256:" + strings.Repeat("f", 64)), ContainerId: proto.String(""),
		Image:    proto.String("docker.io/library/debian:stable"),
		Sessions: []*lv1.SessionStatus{{SessionId: proto.String(strings.Repeat("a", 32))}},
		LingerMs: proto.Int64(600000), LingerLeftMs: proto.Int64(0),
		Participants:        map[string]string{"sandbox": "active"},
		AttachedRunscPid:    proto.Uint32(4242),
		NetworkPolicyDigest: proto.String("ab"),
		Network: &lv1.NetworkStatus{
			HelperCidr: proto.String("10.0.2.0/24"), DenyObserved: proto.Bool(true), PermitObserved: proto.Bool(false), DnsObserved: proto.Bool(true),
			FailFast:         []string{"tcp-rst"},
			AllowHostsPinned: map[string]*structpb.ListValue{"example.com": {Values: []*structpb.Value{structpb.NewStringValue("192.0.2.1")}}},
			ForwardedPorts:   []*lv1.ForwardedPort{{Host: proto.String("127.0.0.1:8000"), SandboxPort: proto.Uint32(8000), From: proto.String("profile")}},
		},
		Limits: &lv1.LimitsStatus{
			Memory:    &lv1.MemoryStatus{LimitBytes: proto.Uint64(1 << 40), UsedBytes: proto.Uint64(72 << 20)},
			Processes: &lv1.ProcessesStatus{Limit: proto.Uint64(4096), Tasks: proto.Uint64(9)},
			OpenFiles: &lv1.OpenFilesStatus{Limit: proto.Uint64(1024)},
		},
	}
}

// statusServer answers a StatusRequest with doc.
func statusServer(status *lv1.Status) handler {
	return func(_ *trust.Anchor, fc *control.Conn, first *lv1.ClientFrame, _ *trust.ClientIdentity) {
		if first.GetStatus() == nil {
			return
		}
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Status{Status: status}})
	}
}

// TestStatusesRunningStoppedDenials: a running Domain's document comes
// from its coordinator over the authenticated connection, unchanged; a
// stopped one's from its stored identity; each carries the newest
// RecentDenials of its egress denial log; the list is sorted by workspace.
func TestStatusesRunningStoppedDenials(t *testing.T) {
	roots := newRoots(t)
	want := running("/w/b")
	startCoordinator(t, roots, "/w/b", statusServer(&lv1.Status{Domain: want}))
	stopped, _ := domain.PathsFor(roots, domain.DeriveID(testProfile, "/w/a"))
	storeIdentity(t, stopped, testProfile, "/w/a")
	f, err := os.OpenFile(stopped.NetworkDenials(), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	log, err := egress.NewDenialLog(f, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		if err := log.Record(egress.Denial{Host: "h" + string(rune('0'+i)), Port: 443, Via: "connect", Reason: "not allowed", Decision: "deny"}); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	docs, err := Statuses(roots, nil)
	if err != nil || len(docs) != 2 {
		t.Fatalf("Statuses: %v %v", docs, err)
	}
	if !proto.Equal(docs[1], want) {
		t.Errorf("running Domain:\n got %v\nwant %v", docs[1], want)
	}
	s := docs[0]
	if s.GetWorkspace() != "/w/a" || s.GetState() != "stopped" || s.Generation != nil || s.GetDomainId() != string(stopped.ID) {
		t.Errorf("stopped Domain: %v", s)
	}
	if n := len(s.GetRecentDenials()); n != RecentDenials {
		t.Fatalf("recent denials: %d, want %d", n, RecentDenials)
	}
	first, last := s.GetRecentDenials()[0], s.GetRecentDenials()[RecentDenials-1]
	if first.GetHost() != "h2" || last.GetHost() != "h6" || last.Addr != nil || last.GetPort() != 443 {
		t.Errorf("recent denials: %v … %v", first, last)
	}
	if d := Denial(last); !d.Time.Equal(at) || d.Host != "h6" || d.Decision != "deny" {
		t.Errorf("denial round trip: %+v", d)
	}
	// A selection asks only its Domains' coordinators: the running one it
	// does not take keeps its stored identity and "stopped".
	docs, err = Statuses(roots, func(_, ws string) bool { return ws == "/w/a" })
	if err != nil || len(docs) != 2 || docs[1].GetState() != "stopped" || docs[1].GetWorkspace() != "/w/b" || docs[1].Generation != nil {
		t.Errorf("Statuses of /w/a only: %v %v", docs, err)
	}
}

// TestStatusOfEarlierCoordinator: a coordinator that sends the document
// as JSON (the form before the typed one) is read into the same message.
func TestStatusOfEarlierCoordinator(t *testing.T) {
	roots := newRoots(t)
	old := `{"domain_id":"x","generation":3,"state":"running","sessions":null,"linger_left_ms":1500,` +
		`"limits":{"memory":{"limit_bytes":1099511627776,"used_bytes":75497472},"processes":{"limit":4096}},` +
		`"network":{"forwarded_ports":[{"host":"127.0.0.1:8000","sandbox_port":8000,"from":"profile"}],"allow_hosts_pinned":{"e.com":["192.0.2.1"]}},"some_later_key":1}`
	c := startCoordinator(t, roots, "/w", statusServer(&lv1.Status{Json: []byte(old)}))
	doc, err := LiveStatus(c.paths, testProfile)
	if err != nil {
		t.Fatal(err)
	}
	if doc.GetGeneration() != 3 || doc.GetLingerLeftMs() != 1500 || doc.GetLimits().GetMemory().GetUsedBytes() != 75497472 ||
		doc.GetLimits().GetProcesses().Tasks != nil || doc.GetNetwork().GetForwardedPorts()[0].GetSandboxPort() != 8000 ||
		doc.GetNetwork().GetAllowHostsPinned()["e.com"].GetValues()[0].GetStringValue() != "192.0.2.1" {
		t.Errorf("legacy document: %v", doc)
	}
}

// TestAuthenticateRefusesAnotherDomain: a publication that names another
// Domain (or profile) is refused before anything is sent; no runtime
// directory is "not published".
func TestAuthenticateRefusesAnotherDomain(t *testing.T) {
	roots := newRoots(t)
	c := startCoordinator(t, roots, "/w", statusServer(&lv1.Status{Domain: running("/w")}))
	if _, err := LiveStatus(c.paths, "other"); err == nil || errors.Is(err, ErrNotPublished) {
		t.Errorf("another profile's publication accepted: %v", err)
	}
	absent, _ := domain.PathsFor(roots, domain.DeriveID(testProfile, "/elsewhere"))
	if _, err := LiveStatus(absent, testProfile); !errors.Is(err, ErrNotPublished) {
		t.Errorf("no runtime directory: %v", err)
	}
	if err := os.Chmod(c.paths.RuntimeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Dial(c.paths); err == nil || errors.Is(err, ErrNotPublished) {
		t.Errorf("a group-readable runtime directory was trusted: %v", err)
	}
}

// TestAuthenticateCoordinatorStopping: a coordinator that stops after the
// enrollment (it closes the authenticated connection unread) is reported
// as not published, or ends the session with Retry, so that Run starts or
// joins again instead of failing the session.
func TestAuthenticateCoordinatorStopping(t *testing.T) {
	roots := newRoots(t)
	c := startCoordinator(t, roots, "/w", statusServer(&lv1.Status{Domain: running("/w")}))
	c.stopAfterEnroll = true
	raw, err := Dial(c.paths)
	if err != nil {
		t.Fatal(err)
	}
	// The authenticated connection's handshake overlaps the enrollment:
	// the coordinator closes it in the handshake (ErrNotPublished) or,
	// when the CLI's half of the handshake had ended, before reading the
	// request (the session ends with Retry). Either way the CLI joins again.
	conn, err := Authenticate(raw, c.paths, testProfile)
	if err != nil {
		if !errors.Is(err, ErrNotPublished) {
			t.Fatalf("a coordinator gone after the enrollment: %v, want ErrNotPublished", err)
		}
		return
	}
	defer conn.Close()
	anchor, err := trust.NewSessionAnchor(nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &lv1.RunRequest{ProtocolVersion: lv1.ProtocolVersion_PROTOCOL_VERSION_1, SessionRegistration: anchor.Registration(conn.Identity, conn.ClientID).Encode()}
	s := conn.Session(req, anchor)
	defer s.Close()
	s.Start(SessionOptions{Output: func(lv1.Stream, []byte) {}})
	for ev := range s.Events() {
		if ev.End != nil {
			if !ev.End.Retry {
				t.Fatalf("a coordinator gone after the enrollment: session end %+v, want Retry", ev.End)
			}
			return
		}
	}
	t.Fatal("the session's events ended without an End")
}

// TestSession runs a session against the coordinator: the registration
// binds the Session Anchor to the enrolled client (the real capability is
// issued from it), progress and Accepted arrive as events, output through
// Output in order, input and signals reach the coordinator as frames, and
// the exit status ends it.
func TestSession(t *testing.T) {
	roots := newRoots(t)
	got := make(chan *lv1.ClientFrame, 16)
	gate := make(chan struct{})
	c := startCoordinator(t, roots, "/w", func(a *trust.Anchor, fc *control.Conn, first *lv1.ClientFrame, client *trust.ClientIdentity) {
		reg, err := trust.DecodeSigned(first.GetRun().GetSessionRegistration())
		if err != nil {
			t.Errorf("registration: %v", err)
			return
		}
		if _, _, err := a.IssueSessionCapability(reg, client); err != nil {
			t.Errorf("session capability: %v", err)
			return
		}
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Progress{Progress: &lv1.Progress{Message: "preparing"}}})
		<-gate
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Accepted{Accepted: &lv1.Accepted{SessionId: "s", Generation: 3}}})
		buf := append(make([]byte, control.OutputHeadroom), "out1 "...)
		fc.WriteOutput(lv1.Stream_STREAM_STDOUT, buf)
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Output{Output: &lv1.Output{Stream: lv1.Stream_STREAM_STDERR, Data: []byte("err1")}}})
		for range 3 {
			var f lv1.ClientFrame
			if fc.Read(&f) != nil {
				return
			}
			got <- &f
		}
		fc.Write(&lv1.ServerFrame{Msg: &lv1.ServerFrame_Exit{Exit: &lv1.Exit{Code: 7}}})
	})
	conn, err := Connect(c.paths, testProfile)
	if err != nil {
		t.Fatal(err)
	}
	if conn.Identity.Generation != 3 || conn.ClientID == "" {
		t.Errorf("identity %+v client %q", conn.Identity, conn.ClientID)
	}
	sessionAnchor, err := trust.NewSessionAnchor(nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &lv1.RunRequest{ProtocolVersion: lv1.ProtocolVersion_PROTOCOL_VERSION_1, SessionRegistration: sessionAnchor.Registration(conn.Identity, conn.ClientID).Encode()}
	s := conn.Session(req, sessionAnchor)
	defer s.Close()
	var mu sync.Mutex
	var out strings.Builder
	s.Start(SessionOptions{Output: func(st lv1.Stream, b []byte) {
		mu.Lock()
		out.WriteString(st.String() + ":" + string(b) + ";")
		mu.Unlock()
	}})
	if s.Forward(syscall.SIGINT) {
		t.Error("a signal was forwarded before the session was accepted")
	}
	close(gate)
	var kinds []string
	for ev := range s.Events() {
		if ev.End != nil {
			if ev.End.Code != 7 || ev.End.Err != nil || ev.End.Retry {
				t.Errorf("end %+v", ev.End)
			}
			break
		}
		switch {
		case ev.Frame.GetProgress() != nil:
			kinds = append(kinds, "progress")
		case ev.Frame.GetAccepted() != nil:
			kinds = append(kinds, "accepted")
			s.Stdin([]byte("in"))
			s.Forward(syscall.SIGINT)
			s.Forward(syscall.SIGTERM)
		}
	}
	if strings.Join(kinds, ",") != "progress,accepted" {
		t.Errorf("events %v", kinds)
	}
	mu.Lock()
	if out.String() != "STREAM_STDOUT:out1 ;STREAM_STDERR:err1;" {
		t.Errorf("output %q", out.String())
	}
	mu.Unlock()
	if f := <-got; string(f.GetStdin().GetData()) != "in" {
		t.Errorf("stdin frame %v", f)
	}
	if f := <-got; f.GetInterrupt() == nil {
		t.Errorf("SIGINT frame %v", f)
	}
	if f := <-got; f.GetSignal().GetSignal() != int32(syscall.SIGTERM) {
		t.Errorf("SIGTERM of a non-interactive session: %v", f)
	}
}

// TestAuthenticatePreparedKeys: keys prepared ahead enroll once; a second
// use is refused rather than enrolling the same key again.
func TestAuthenticatePreparedKeys(t *testing.T) {
	roots := newRoots(t)
	c := startCoordinator(t, roots, "/w", statusServer(&lv1.Status{Domain: running("/w")}))
	keys := PrepareKeys()
	for i, wantErr := range []bool{false, true} {
		raw, err := Dial(c.paths)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := AuthenticateWith(raw, c.paths, testProfile, keys)
		if (err != nil) != wantErr {
			t.Fatalf("authentication %d with prepared keys: %v", i+1, err)
		}
		if err == nil {
			if conn.ClientID == "" {
				t.Error("no Client CLI ID")
			}
			conn.Close()
		}
	}
}
