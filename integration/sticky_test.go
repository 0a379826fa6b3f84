package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stickyPaths returns `lazaret state ignored list --json`'s sticky paths
// of the default profile's Domain of ws, by path.
func stickyPaths(t *testing.T, ws string) map[string]map[string]any {
	t.Helper()
	r := lz(t, ws, nil, "state", "ignored", "list", "--json")
	var m struct {
		Sticky []map[string]any `json:"sticky"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &m) != nil {
		t.Fatalf("state ignored list --json: %+v", r)
	}
	out := map[string]map[string]any{}
	for _, p := range m.Sticky {
		out[p["path"].(string)] = p
	}
	return out
}

// TestSR13GitignoreEditCannotUndoIsolation (spec §3.4, §3.8, SR-13) is
// the attack: the sandbox removes `.venv/` and `.env` from the
// workspace's .gitignore so that the next generation, which reads the
// edited rules, would show it the host's .venv and .env.
// Ignore isolation must not be undone from inside: both stay routed to the
// Domain's state (sticky), neither readable nor writable inside, also after
// the host tracks .env with `git add -f`; `state ignored list` shows them as
// sticky, `release` is refused while the Domain is active, and only after
// the developer releases .venv from the host does the next generation show
// the host's .venv (.env, not released, stays isolated).
func TestSR13GitignoreEditCannotUndoIsolation(t *testing.T) {
	parallel(t)
	e := need(t)
	ws := workspace(t)
	marker := "lazaret-marker-" + randHex(6)
	git := gitRepo(t, e, ws)
	writeAs(t, e, filepath.Join(ws, ".gitignore"), ".venv/\n.env\n")
	git("add", ".gitignore")
	git("commit", "-qm", "ignore .venv and .env")
	writeAs(t, e, filepath.Join(ws, ".venv", "secret"), marker+"-venv\n")
	writeAs(t, e, filepath.Join(ws, ".env"), marker+"-env\n")
	hostUnchanged := func(when string) {
		t.Helper()
		if b, _ := os.ReadFile(filepath.Join(ws, ".venv", "secret")); string(b) != marker+"-venv\n" {
			t.Errorf("%s: the host's .venv/secret changed: %q", when, b)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, ".env")); string(b) != marker+"-env\n" {
			t.Errorf("%s: the host's .env changed: %q", when, b)
		}
	}

	// Generation 1: the host copies are invisible (existing behaviour); the
	// sandbox un-ignores them (a tracked, visible change the next
	// generation reads like the developer's own edit).
	r := lz(t, ws, nil, "run", "--", "sh", "-c", `cd /workspace
cat .venv/secret .env 2>/dev/null; echo "LIST $(ls -a | tr '\n' ' ')"
printf '# nothing ignored\n' > .gitignore && echo EDITED`)
	if r.code != 0 || !strings.Contains(r.stdout, "EDITED") {
		t.Fatalf("generation 1: %+v", r)
	}
	if strings.Contains(r.stdout, marker) {
		t.Fatalf("generation 1 saw host content at ignored paths:\n%s", r.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".gitignore")); string(b) != "# nothing ignored\n" {
		t.Fatalf("the attack did not reach the host's .gitignore: %q", b)
	}
	if got := git("status", "--porcelain", "--ignored"); !strings.Contains(got, "?? .venv/") || !strings.Contains(got, "?? .env") {
		t.Fatalf("host Git still ignores .venv or .env: %q", got)
	}
	noLeftovers(t)

	// Generation 2 reads the edited rules: the host copies must still be
	// neither readable nor writable inside.
	gen2 := `cd /workspace
cat .venv/secret .env 2>/dev/null; echo "LIST $(ls -a | tr '\n' ' ')"
mkdir -p .venv && echo overwritten > .venv/secret && echo overwritten > .env && echo WROTE`
	r = lz(t, ws, nil, "run", "--", "sh", "-c", gen2)
	t.Logf("generation 2 inside:\n%s", r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "WROTE") {
		t.Fatalf("generation 2: %+v", r)
	}
	if strings.Contains(r.stdout, marker) {
		t.Errorf("generation 2 saw the host's .venv/.env after the sandbox edited .gitignore:\n%s", r.stdout)
	}
	hostUnchanged("generation 2")
	noLeftovers(t)

	// The host now tracks .env: still sticky (routed to state until
	// released), and the list says so.
	git("add", "-f", ".env")
	git("commit", "-qm", "track .env")
	sticky := stickyPaths(t, ws)
	for _, p := range []string{".venv", ".env"} {
		s := sticky[p]
		if s == nil || s["generation"] != float64(1) || s["since"] == nil || s["ignored_now"] != false {
			t.Errorf("list: %s not sticky since generation 1 and no longer ignored: %v (all: %v)", p, s, sticky)
		}
	}
	if sticky[".env"]["tracked"] != true || sticky[".venv"]["tracked"] == true {
		t.Errorf("list: tracked flags: %v", sticky)
	}
	h := lz(t, ws, nil, "state", "ignored", "list")
	t.Logf("state ignored list:\n%s", h.stdout)
	if h.code != 0 || !strings.Contains(h.stdout, "sticky") || !strings.Contains(h.stdout, ".venv") || !strings.Contains(h.stdout, "tracked") {
		t.Errorf("human list: %+v", h)
	}
	r = lz(t, ws, nil, "run", "--", "sh", "-c", "cat /workspace/.env; echo; cat /workspace/.venv/secret")
	if r.code != 0 || strings.Contains(r.stdout, marker) || !strings.Contains(r.stdout, "overwritten") {
		t.Errorf("after git add -f .env on the host: %+v", r)
	}
	hostUnchanged("after git add -f")
	noLeftovers(t)

	// Release: refused while the Domain is active, for a path that is not
	// sticky and inside a sticky one; then done from the host.
	in, _, wait := holdSession(t, ws, "default")
	if r = lz(t, ws, nil, "state", "ignored", "release", ".venv", "--yes"); r.code == 0 || !strings.Contains(r.stderr, "is active") {
		t.Errorf("release on an active Domain: %+v", r)
	}
	in.Close()
	wait()
	noLeftovers(t)
	if r = lz(t, ws, nil, "state", "ignored", "release", ".venv/secret", "--yes"); r.code == 0 || !strings.Contains(r.stderr, "give .venv") {
		t.Errorf("release inside a sticky path: %+v", r)
	}
	if r = lz(t, ws, nil, "state", "ignored", "release", "a.txt", "--yes"); r.code == 0 || !strings.Contains(r.stderr, "not sticky") {
		t.Errorf("release of a path that is not sticky: %+v", r)
	}
	if r = lz(t, ws, nil, "state", "ignored", "release", ".venv"); r.code == 0 || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("release without a terminal and --yes: %+v", r)
	}
	r = lz(t, ws, nil, "state", "ignored", "release", ".venv", "--yes")
	if r.code != 0 || !strings.Contains(r.stderr, "from the next run the sandbox sees your host copy") || !strings.Contains(r.stdout, "state ignored reset .venv") {
		t.Fatalf("release .venv: %+v", r)
	}
	sticky = stickyPaths(t, ws)
	if sticky[".venv"] != nil || sticky[".env"] == nil {
		t.Errorf("after release: %v", sticky)
	}

	// Generation 3: the developer's explicit choice — the host's .venv is
	// shared; .env stays isolated.
	r = lz(t, ws, nil, "run", "--", "sh", "-c", "cat /workspace/.venv/secret; cat /workspace/.env")
	if r.code != 0 || !strings.Contains(r.stdout, marker+"-venv") || strings.Contains(r.stdout, marker+"-env") {
		t.Errorf("generation 3 after releasing .venv: %+v", r)
	}
	hostUnchanged("generation 3")
	noLeftovers(t)
}
