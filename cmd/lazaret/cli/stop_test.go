package cli

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	lv1 "github.com/lazaret/lazaret/api/lazaret/v1"
)

// TestLiveDomainsHint: a `lazaret stop` that named no profile and found
// the default profile's Domain stopped names the other Domains of the
// same workspace that are not stopped — only those, and not the one it
// looked at.
func TestLiveDomainsHint(t *testing.T) {
	docs := []*lv1.DomainStatus{
		statusDoc("/src/app", "default", "stopped"),
		statusDoc("/src/app", "tiny", "running"),
		statusDoc("/src/app", "claude", "starting"),
		statusDoc("/src/app", "old", "stopped"),
		statusDoc("/src/other", "codex", "running"),
		{State: proto.String("running")}, // no stored identity
	}
	got := liveDomains(docs, "/src/app", "default")
	want := []liveDomain{{"tiny", "running"}, {"claude", "starting"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("liveDomains = %v, want %v", got, want)
	}
	if got := liveDomains(docs, "/src/none", "default"); len(got) != 0 {
		t.Errorf("a workspace with no Domain: %v", got)
	}
	if got := liveDomains(docs, "/src/app", "tiny"); !reflect.DeepEqual(got, []liveDomain{{"claude", "starting"}}) {
		t.Errorf("the profile stop looked at is no hint: %v", got)
	}
}

// statusDoc is a status document of a Domain of profile in workspace ws,
// in state, identified as ws/profile.
func statusDoc(ws, profile, state string) *lv1.DomainStatus {
	return &lv1.DomainStatus{DomainId: proto.String(ws + "/" + profile), Workspace: proto.String(ws), Profile: proto.String(profile), State: proto.String(state)}
}
