package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/failpoint"
)

// profilePathsConfig writes a configuration whose profile pp runs the
// Debian image as user agent with two profile paths: one inside the /home
// State Anchor (~/.login), one outside every anchor (/srv/tool-state).
func profilePathsConfig(t *testing.T) string {
	t.Helper()
	return userConfig(t, need(t), "[profiles.pp]\nimage = \"debian\"\nuser = \"agent\"\nprofile_paths = [\"~/.login\", \"/srv/tool-state\"]\n")
}

// profileListJSON is `lazaret state list --json` of profile in ws.
func (r *rmEnv) profileListJSON(t *testing.T, ws, cfg, profile string) map[string]map[string]any {
	t.Helper()
	res := r.run(t, ws, "state", "list", "--config", cfg, "-p", profile, "--json")
	if res.code != 0 {
		t.Fatalf("state list: %+v", res)
	}
	var doc struct {
		ProfilePaths []map[string]any `json:"profile_paths"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil {
		t.Fatalf("state list --json: %v\n%s", err, res.stdout)
	}
	out := map[string]map[string]any{}
	for _, p := range doc.ProfilePaths {
		out[p["guest_path"].(string)] = p
	}
	return out
}

func ownerUID(t *testing.T, p string) int {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

// TestSpec35ProfilePathsSharedAcrossWorkspaces: what a sandbox writes in a
// profile path (login state) is there in a fresh workspace's sandbox of the
// same profile, whose image is not rebuilt; the stored directories belong
// to the session user's guest id (a subordinate id on the host), the home
// is the user's although the profile path's mount point made it exist;
// `state list` shows the paths with sizes; a reset is refused while a
// sandbox of the profile runs in any workspace, asks first, and discards a
// path's files — those of guest uid 1000 in a private directory included —
// inside the user namespace, leaving the other path; `rm` of one Domain
// keeps the profile paths and `rm --all` removes them.
func TestSpec35ProfilePathsSharedAcrossWorkspaces(t *testing.T) {
	r := newRmEnv(t)
	e := r.e
	cfg := profilePathsConfig(t)
	wsA, wsB := workspace(t), workspace(t)
	write := `id -un; stat -c '%U %a' ~ ~/.login /srv/tool-state; test -f ~/.bashrc && echo skel;
echo token > ~/.login/creds && mkdir ~/.login/priv && echo s > ~/.login/priv/f && chmod 700 ~/.login/priv &&
echo '{}' > ~/.login/c.json.tmp && mv ~/.login/c.json.tmp ~/.login/c.json && echo t > /srv/tool-state/t && echo wrote`
	res := r.run(t, wsA, "run", "--config", cfg, "-p", "pp", "--", "sh", "-c", write)
	if res.code != 0 || res.stdout != "agent\nagent 750\nagent 700\nagent 700\nskel\nwrote\n" {
		t.Fatalf("workspace A: %+v", res)
	}
	data := func(g string) string {
		return filepath.Join(r.storageRoot, "profiles", "pp", "paths", strings.ReplaceAll(strings.TrimPrefix(g, "/"), "/", "%2F"), "data")
	}
	if uid := ownerUID(t, data("/home/agent/.login")); uid != e.subStart+999 {
		t.Fatalf("stored ~/.login belongs to host uid %d, want guest 1000 = subordinate id %d", uid, e.subStart+999)
	}
	res = r.run(t, wsB, "run", "--config", cfg, "-p", "pp", "--", "sh", "-c", "cat ~/.login/creds ~/.login/priv/f ~/.login/c.json /srv/tool-state/t")
	if res.code != 0 || res.stdout != "token\ns\n{}\nt\n" {
		t.Fatalf("workspace B does not read A's login state: %+v", res)
	}
	if strings.Contains(res.stderr, "building") {
		t.Errorf("workspace B rebuilt the image: %s", res.stderr)
	}
	list := r.profileListJSON(t, wsB, cfg, "pp")
	login, tool := list["/home/agent/.login"], list["/srv/tool-state"]
	if login == nil || tool == nil || login["bytes"] != float64(6+2+3) || login["files"] != float64(4) || tool["bytes"] != float64(2) || login["configured"] != true || login["size_known"] != true {
		t.Fatalf("state list profile paths: %v", list)
	}
	res = r.run(t, wsB, "state", "list", "--config", cfg, "-p", "pp")
	if !strings.Contains(res.stdout, "Profile paths of profile pp") || !strings.Contains(res.stdout, "/home/agent/.login") || !strings.Contains(res.stdout, "11 B, 4 entries") {
		t.Errorf("state list text: %s", res.stdout)
	}

	// A running sandbox of the profile, in workspace A, holds its paths.
	c := holdDomainWith(t, wsA, "pp", r.env, "run", "--config", cfg, "-p", "pp", "--", "sleep", "60")
	res = r.run(t, wsB, "state", "reset", "--config", cfg, "-p", "pp", "--profile-paths", "--yes")
	if res.code == 0 || !strings.Contains(res.stderr, "a sandbox of profile pp is running") {
		t.Errorf("reset while a sandbox of the profile runs elsewhere: %+v", res)
	}
	c.Process.Kill()
	c.Wait()
	noLeftovers(t)

	res = r.run(t, wsB, "state", "reset", "--config", cfg, "-p", "pp", "~/.login")
	if res.code == 0 || !strings.Contains(res.stderr, "--yes") || !strings.Contains(res.stderr, "shared by every workspace") {
		t.Errorf("reset without --yes off a terminal: %+v", res)
	}
	res = r.run(t, wsB, "state", "reset", "--config", cfg, "-p", "pp", "~/.login", "--yes")
	if res.code != 0 || !strings.Contains(res.stdout, "reset: /home/agent/.login (profile pp)") {
		t.Fatalf("reset ~/.login: %+v", res)
	}
	if _, err := os.Lstat(filepath.Dir(data("/home/agent/.login"))); !os.IsNotExist(err) {
		t.Errorf("the reset path's entry is still there: %v", err)
	}
	if left := r.trash(t); len(left) != 0 {
		t.Errorf("the reset left files in the trash (not deleted in the user namespace): %v", left)
	}
	list = r.profileListJSON(t, wsA, cfg, "pp")
	if list["/home/agent/.login"]["stored"] != false || list["/srv/tool-state"]["stored"] != true {
		t.Errorf("after reset ~/.login: %v", list)
	}
	res = r.run(t, wsA, "run", "--config", cfg, "-p", "pp", "--", "sh", "-c", "ls -A ~/.login; stat -c %U ~/.login; cat /srv/tool-state/t")
	if res.code != 0 || res.stdout != "agent\nt\n" {
		t.Fatalf("after reset ~/.login: %+v", res)
	}

	// rm of one Domain keeps the profile's paths, and says so (once the
	// coordinator has released the Domain's lease and exited).
	noLeftovers(t)
	res = r.run(t, wsA, "rm", "-p", "pp", "--yes")
	if res.code != 0 || !strings.Contains(res.stderr, "shared by every workspace, are kept") {
		t.Fatalf("rm of Domain A: %+v", res)
	}
	if _, err := os.Lstat(data("/srv/tool-state")); err != nil {
		t.Fatalf("rm of one Domain removed the profile's paths: %v", err)
	}
	res = r.run(t, wsB, "state", "reset", "--config", cfg, "-p", "pp", "/nonexistent", "--yes")
	if res.code == 0 || !strings.Contains(res.stderr, "no profile path there") {
		t.Errorf("reset of an unknown path: %+v", res)
	}
	// rm --all removes them with everything else.
	res = r.run(t, wsB, "rm", "--all", "--yes")
	if res.code != 0 {
		t.Fatalf("rm --all: %+v", res)
	}
	if _, err := os.Lstat(r.storageRoot); !os.IsNotExist(err) {
		t.Errorf("rm --all left the Storage Root: %v %v", err, filesUnder(r.storageRoot))
	}
	noLeftovers(t)
}

// TestSpec35ProfilePathsBuiltinClaude: the built-in claude profile keeps
// ~/.claude per profile, with CLAUDE_CONFIG_DIR pointing there (Claude
// Code then keeps its .claude.json inside it, replaced by rename, which
// works inside a bound directory): login state written in one workspace
// is read in another, whose start reuses the built image; a reset of the
// profile paths discards it.
func TestSpec35ProfilePathsBuiltinClaude(t *testing.T) {
	r := newRmEnv(t)
	wsA, wsB := workspace(t), workspace(t)
	write := `echo "$CLAUDE_CONFIG_DIR"; claude --version >/dev/null && echo version-ok;
echo '{"oauthAccount":"probe"}' > "$CLAUDE_CONFIG_DIR/.claude.json.tmp" && mv "$CLAUDE_CONFIG_DIR/.claude.json.tmp" "$CLAUDE_CONFIG_DIR/.claude.json" &&
echo secret > ~/.claude/.credentials.json && chmod 600 ~/.claude/.credentials.json && stat -c '%U %a' ~ ~/.claude`
	res := lzFor(t, 20*time.Minute, wsA, r.env, nil, "run", "-p", "claude", "--", "sh", "-c", write)
	if res.code != 0 || res.stdout != "/home/agent/.claude\nversion-ok\nagent 750\nagent 700\n" {
		t.Fatalf("workspace A: %+v", res)
	}
	res = lzFor(t, 5*time.Minute, wsB, r.env, nil, "run", "-p", "claude", "--", "sh", "-c", "cat ~/.claude/.claude.json ~/.claude/.credentials.json")
	if res.code != 0 || res.stdout != "{\"oauthAccount\":\"probe\"}\nsecret\n" {
		t.Fatalf("workspace B does not read the login state: %+v", res)
	}
	if strings.Contains(res.stderr, "building") {
		t.Errorf("workspace B rebuilt the image: %s", res.stderr)
	}
	res = r.run(t, wsB, "state", "list", "-p", "claude")
	if !strings.Contains(res.stdout, "/home/agent/.claude") || !strings.Contains(res.stdout, "2 entries") {
		t.Errorf("state list: %+v", res)
	}
	res = r.run(t, wsB, "state", "reset", "-p", "claude", "--profile-paths", "--yes")
	if res.code != 0 || !strings.Contains(res.stdout, "reset: /home/agent/.claude") {
		t.Fatalf("reset: %+v", res)
	}
	res = lzFor(t, 5*time.Minute, wsA, r.env, nil, "run", "-p", "claude", "--", "sh", "-c", "ls -A ~/.claude | wc -l")
	if res.code != 0 || strings.TrimSpace(res.stdout) != "0" {
		t.Fatalf("after the reset: %+v", res)
	}
	noLeftovers(t) // the coordinators have released their leases
	if res = r.run(t, wsA, "rm", "--all", "--yes"); res.code != 0 {
		t.Fatalf("rm --all: %+v", res)
	}
	if _, err := os.Lstat(r.storageRoot); !os.IsNotExist(err) {
		t.Errorf("rm --all left the Storage Root: %v %v", err, filesUnder(r.storageRoot))
	}
	noLeftovers(t)
}

// TestSpec38ProfilePathResetCrashConsistency (OR-5): a profile path reset
// killed after its rename leaves the entry wholly in the Storage Root's
// trash, never half in place: the next run of the profile, in another
// workspace, starts with an empty directory and deletes the trash (files
// of guest uid 1000 included) in the user namespace.
func TestSpec38ProfilePathResetCrashConsistency(t *testing.T) {
	needFailpoints(t)
	r := newRmEnv(t)
	e := r.e
	cfg := profilePathsConfig(t)
	wsA, wsB := workspace(t), workspace(t)
	res := r.run(t, wsA, "run", "--config", cfg, "-p", "pp", "--", "sh", "-c", "mkdir ~/.login/priv && echo s > ~/.login/priv/f && chmod 700 ~/.login/priv && echo ok")
	if res.code != 0 || res.stdout != "ok\n" {
		t.Fatalf("write: %+v", res)
	}
	noLeftovers(t)
	res = r.lz(t, e.binFP, wsA, nil, []string{failpoint.Env + "=lazaret:profile-reset:moved"}, "state", "reset", "--config", cfg, "-p", "pp", "~/.login", "--yes")
	if res.code == 0 || !strings.Contains(res.stderr, "failpoint hit: lazaret:profile-reset:moved") {
		t.Fatalf("reset with the failpoint armed: %+v", res)
	}
	if left := r.trash(t); len(left) != 1 || !strings.HasPrefix(left[0], "profile-path.") {
		t.Fatalf("after the interrupted reset the trash holds %v, want the entry", left)
	}
	list := r.profileListJSON(t, wsB, cfg, "pp")
	if list["/home/agent/.login"]["stored"] != false {
		t.Fatalf("the interrupted reset left the entry in place: %v", list)
	}
	res = r.run(t, wsB, "run", "--config", cfg, "-p", "pp", "--", "sh", "-c", "ls -A ~/.login; echo end")
	if res.code != 0 || res.stdout != "end\n" {
		t.Fatalf("run after the interrupted reset: %+v", res)
	}
	noLeftovers(t)
	if left := r.trash(t); len(left) != 0 {
		t.Errorf("the next run left the trash: %v", left)
	}
	if res = r.run(t, wsA, "rm", "--all", "--yes"); res.code != 0 {
		t.Fatalf("rm --all: %+v", res)
	}
	noLeftovers(t)
}
