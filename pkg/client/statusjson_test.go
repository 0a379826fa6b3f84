package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
	"github.com/lazaret/lazaret/pkg/egress"
)

// untyped is the document of running("/w") as the coordinator built it
// before the typed document: Go maps encoded with encoding/json.
func untyped(ws string) map[string]any {
	d := running(ws)
	return map[string]any{
		"domain_id": d.GetDomainId(), "profile": d.GetProfile(), "workspace": d.GetWorkspace(),
		"generation": d.GetGeneration(), "state": "running", "coordinator_id": d.GetCoordinatorId(),
		"configuration_fingerprint": d.GetConfigurationFingerprint(), "container_id": "",
		"sessions": []map[string]any{{"session_id": strings.Repeat("a", 32)}}, "image": d.GetImage(),
		"linger_ms": int64(600000), "linger_left_ms": int64(0),
		"participants": map[string]string{"sandbox": "active"}, "attached_runsc_pid": uint32(4242),
		"network_policy_digest": "ab",
		"network": map[string]any{
			"helper_cidr": "10.0.2.0/24", "deny_observed": true, "permit_observed": false, "dns_observed": true,
			"fail_fast": []string{"tcp-rst"}, "allow_hosts_pinned": map[string][]string{"example.com": {"192.0.2.1"}},
			"forwarded_ports": []map[string]any{{"host": "127.0.0.1:8000", "sandbox_port": uint16(8000), "from": "profile"}},
		},
		"limits": map[string]any{
			"memory":     map[string]any{"limit_bytes": uint64(1 << 40), "used_bytes": uint64(72 << 20)},
			"processes":  map[string]any{"limit": uint64(4096), "tasks": uint64(9)},
			"open_files": map[string]any{"limit": uint64(1024)},
		},
	}
}

func encodeUntyped(t *testing.T, docs []map[string]any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(docs); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestMarshalStatusJSONAsBefore: `lazaret status --json` prints exactly
// the bytes the untyped document printed (keys, sorting, indentation,
// 64-bit integers as numbers), including a stopped Domain's short
// document and no Domain at all (null).
func TestMarshalStatusJSONAsBefore(t *testing.T) {
	stopped := &lv1.DomainStatus{DomainId: proto.String("d2"), State: proto.String("stopped"), Profile: proto.String("p"), Workspace: proto.String("/x"), Sessions: nil}
	got, err := MarshalStatusJSON([]*lv1.DomainStatus{running("/w"), stopped})
	if err != nil {
		t.Fatal(err)
	}
	stoppedDoc := map[string]any{"domain_id": "d2", "state": "stopped", "profile": "p", "workspace": "/x"}
	if want := encodeUntyped(t, []map[string]any{untyped("/w"), stoppedDoc}); !bytes.Equal(got, want) {
		t.Errorf("status --json changed:\n got %s\nwant %s", got, want)
	}
	// A running Domain with no session and no port: the lists are there,
	// empty (the untyped document had null for sessions).
	idle := running("/w")
	idle.Sessions, idle.Network.ForwardedPorts = nil, nil
	b, err := MarshalStatusJSON([]*lv1.DomainStatus{idle})
	var docs []map[string]any
	if err != nil || json.Unmarshal(b, &docs) != nil {
		t.Fatalf("idle: %v %s", err, b)
	}
	if s, ok := docs[0]["sessions"].([]any); !ok || len(s) != 0 {
		t.Errorf("idle sessions: %v", docs[0]["sessions"])
	}
	if p, ok := docs[0]["network"].(map[string]any)["forwarded_ports"].([]any); !ok || len(p) != 0 {
		t.Errorf("idle forwarded_ports: %v", docs[0]["network"])
	}
	if got, _ := MarshalStatusJSON(nil); string(got) != "null\n" {
		t.Errorf("no Domains: %q", got)
	}
}

// TestMarshalStatusJSONDenials: recent_denials carry the denial log's
// fields under its keys (time as RFC 3339, addr only when known); empty
// lists that were absent before stay absent.
func TestMarshalStatusJSONDenials(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	ds := []egress.Denial{
		{V: 1, Time: at, Session: "s", Host: "h", Port: 443, Via: "connect", Reason: "r", Decision: "deny"},
		{V: 1, Time: at, Host: "h", Port: 80, Addr: "192.0.2.1", Via: "http", Reason: "r", Decision: "deny"},
	}
	doc := &lv1.DomainStatus{DomainId: proto.String("d"), State: proto.String("stopped")}
	for _, d := range ds {
		doc.RecentDenials = append(doc.RecentDenials, DenialStatus(d))
	}
	got, err := MarshalStatusJSON([]*lv1.DomainStatus{doc})
	if err != nil {
		t.Fatal(err)
	}
	var gotV, wantV any
	json.Unmarshal(got, &gotV)
	json.Unmarshal(encodeUntyped(t, []map[string]any{{"domain_id": "d", "state": "stopped", "recent_denials": ds}}), &wantV)
	if !reflect.DeepEqual(gotV, wantV) {
		t.Errorf("denials:\n got %s\nwant %v", got, wantV)
	}
	for _, absent := range []string{"retained", "routes", "warnings", "participants", "network", "limits", "failure", "error"} {
		if strings.Contains(string(got), `"`+absent+`"`) {
			t.Errorf("%s rendered though unset: %s", absent, got)
		}
	}
}
