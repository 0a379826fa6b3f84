package trace

import (
	"bytes"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/model/check"
	"github.com/lazaret/lazaret/pkg/model/lazaret"
	"github.com/lazaret/lazaret/pkg/model/preparedlower"
)

func TestVocabularyMatchesModels(t *testing.T) {
	for model, names := range map[string][]string{
		"Lazaret":       lazaret.ActionNames(),
		"PreparedLower": preparedlower.ActionNames(),
	} {
		var vocab []string
		for _, v := range Vocabulary {
			if v.Model == model {
				vocab = append(vocab, v.Action)
				recorded := false
				for _, r := range []string{"hc", "rs", "bootstrap", "cli"} {
					recorded = recorded || v.RecordedBy(r)
				}
				if !recorded {
					t.Errorf("%s.%s has no recording role", model, v.Action)
				}
			}
		}
		sort.Strings(vocab)
		sort.Strings(names)
		if strings.Join(vocab, " ") != strings.Join(names, " ") {
			t.Errorf("%s vocabulary\n%v\ndiffers from model actions\n%v", model, vocab, names)
		}
	}
}

// binding abstracts product identifiers of one HC/RS run to Lazaret.cfg.
func binding() Binding {
	b := Binding{}
	b.Bind(Domain, "dom-7f3a9c", "D1")
	b.Bind(Session, "ses-01", "S1")
	b.Bind(Session, "ses-02", "S2")
	b.Bind(Request, "esc-aa", "R1")
	b.Bind(Request, "esc-bb", "R2")
	b.Bind(Command, "sha256:edited", "EditedCmd")
	return b
}

func recorded() []Event {
	ev := func(seq uint64, role, action string, obs map[string]string, args ...string) Event {
		return Event{Seq: seq, Model: "Lazaret", Action: action, Args: args, Role: role, Observed: obs}
	}
	return []Event{
		ev(1, "hc", "StartNewDomain", map[string]string{"domainPhase[D1]": `"Starting"`, "lockOwner[D1]": "S1"}, "ses-01"),
		ev(2, "hc", "CreateTrustAnchor", nil, "dom-7f3a9c"),
		ev(3, "hc", "StartRuntimeSupervisor", map[string]string{"supervisorLease[D1]": `"Held"`}, "dom-7f3a9c"),
		ev(4, "rs", "MountStateAnchor", map[string]string{"stateAnchorState[D1]": `"Mounted"`}, "dom-7f3a9c"),
		ev(5, "hc", "StartSidecar", map[string]string{"sidecarState[D1]": `"Ready"`}, "dom-7f3a9c"),
		ev(6, "rs", "ArmRuntimeCausalEdge", nil, "dom-7f3a9c"),
		ev(7, "rs", "StartSandbox", map[string]string{"durableSandboxIntent[D1]": "TRUE", "sandboxState[D1]": `"Ready"`}, "dom-7f3a9c"),
		ev(8, "hc", "PublishDomain", map[string]string{"published": "{D1}"}, "dom-7f3a9c"),
		ev(9, "hc", "AdvanceWaitingSession", nil, "ses-01"),
		ev(10, "hc", "RegisterSession", nil, "ses-01"),
		ev(11, "hc", "StartReadySession", nil, "ses-02"),
		ev(12, "hc", "RegisterSession", map[string]string{"registered[D1]": "{S1, S2}"}, "ses-02"),
		ev(13, "hc", "ReceiveEscalation", nil, "esc-bb"),
		ev(14, "hc", "QueuePrompt", nil, "esc-bb"),
		ev(15, "hc", "BeginPrompt", map[string]string{"terminalRoute[S2]": `"Prompt"`}, "esc-bb"),
		ev(16, "hc", "DeveloperApprove", map[string]string{"approvedCommand[R2]": "EditedCmd"}, "esc-bb", "sha256:edited"),
		ev(17, "hc", "StartHostExecution", map[string]string{"hostRunning": "{R2}"}, "esc-bb"),
		ev(18, "hc", "CompleteHostExecution", nil, "esc-bb"),
		ev(19, "hc", "DeliverResult", map[string]string{"requestPhase[R2]": `"Completed"`}, "esc-bb"),
	}
}

func TestReplayRecordedTrace(t *testing.T) {
	m := lazaret.New(lazaret.Fixture())
	var buf bytes.Buffer
	w := JSONLWriter{W: &buf}
	for _, e := range recorded() {
		if err := w.Record(e); err != nil {
			t.Fatal(err)
		}
	}
	events, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	states, err := Replay(m.Spec(), m.Init(), binding(), events)
	if err != nil {
		t.Fatalf("recorded trace rejected: %v", err)
	}
	if len(states) != len(events)+1 {
		t.Fatalf("replayed %d states for %d events", len(states), len(events))
	}
}

func TestReplayRejects(t *testing.T) {
	m := lazaret.New(lazaret.Fixture())
	sp := m.Spec()
	mutate := func(f func([]Event) []Event) []Event { return f(recorded()) }
	cases := map[string][]Event{
		"observation disagrees with the model": mutate(func(e []Event) []Event {
			e[6].Observed["durableSandboxIntent[D1]"] = "FALSE"
			return e
		}),
		"publication before network readiness": mutate(func(e []Event) []Event {
			return append(e[:4:4], e[7])
		}),
		"host execution without approval": mutate(func(e []Event) []Event {
			return append(e[:13:13], e[16])
		}),
		"unknown action": mutate(func(e []Event) []Event {
			e[1].Action = "CreateTrustAnchorV2"
			return e
		}),
		"unbound identifier": mutate(func(e []Event) []Event {
			e[1].Args = []string{"dom-other"}
			return e
		}),
		"wrong arity": mutate(func(e []Event) []Event {
			e[15].Args = e[15].Args[:1]
			return e
		}),
		"wrong recording role": mutate(func(e []Event) []Event {
			e[7].Role = "rs"
			return e
		}),
	}
	for name, events := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Replay(sp, m.Init(), binding(), events)
			if err == nil {
				t.Fatal("accepted")
			}
			t.Logf("rejected: %v", err)
		})
	}
	var mm *MismatchError
	_, err := Replay(sp, m.Init(), binding(), cases["observation disagrees with the model"])
	if !errors.As(err, &mm) || mm.Variable != "durableSandboxIntent[D1]" {
		t.Fatalf("want a MismatchError on durableSandboxIntent[D1], got %v", err)
	}
	var re *check.ReplayError
	if _, err := Replay(sp, m.Init(), binding(), cases["publication before network readiness"]); !errors.As(err, &re) {
		t.Fatalf("want a ReplayError, got %v", err)
	}
}

func TestPreparedLowerTrace(t *testing.T) {
	m := preparedlower.New(preparedlower.Fixture())
	b := Binding{}
	b.Bind(Artifact, "sha256:rootfs", "A1")
	b.Bind(Generation, "dom-7f3a9c/3", "G1")
	ev := func(seq uint64, role, action, arg string, obs map[string]string) Event {
		return Event{Seq: seq, Model: "PreparedLower", Action: action, Args: []string{arg}, Role: role, Observed: obs}
	}
	events := []Event{
		ev(1, "hc", "AcquireLeaseIntent", "dom-7f3a9c/3", nil),
		ev(2, "rs", "BeginPrepare", "sha256:rootfs", nil),
		ev(3, "rs", "CreateStageTree", "sha256:rootfs", nil),
		ev(4, "rs", "PublishArtifact", "sha256:rootfs", map[string]string{"artifact[A1]": `"Published"`}),
		ev(5, "hc", "InsertLease", "dom-7f3a9c/3", map[string]string{"lease[A1]": `{"G1"}`}),
		ev(6, "hc", "CommitLeaseHeld", "dom-7f3a9c/3", nil),
		ev(7, "hc", "SpawnSupervisor", "dom-7f3a9c/3", map[string]string{"rsSlot[G1]": `"Staged"`}),
		ev(8, "hc", "AnchorIntent", "dom-7f3a9c/3", nil),
		// The staged supervisor mounts: a Staged slot satisfying readiness.
		ev(9, "rs", "MountAnchor", "dom-7f3a9c/3", nil),
	}
	if _, err := Replay(m.Spec(), m.Init(), b, events[:8]); err != nil {
		t.Fatalf("legal prefix rejected: %v", err)
	}
	if _, err := Replay(m.Spec(), m.Init(), b, events); err == nil {
		t.Fatal("mount under Staged ownership accepted")
	}
}

func TestProject(t *testing.T) {
	m := lazaret.New(lazaret.Fixture())
	p := Project(m.Format(m.Init()))
	if p["domainPhase[D1]"] != `"Absent"` || p["published"] != "{}" || p["lockOwner[D1]"] != "NoSession" ||
		p["runtimeFaultsRemaining[D1]"] != "2" || p["activeRequest[S2]"] != "NoRequest" {
		t.Fatalf("unexpected projection %v", p)
	}
}
