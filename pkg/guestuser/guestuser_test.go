package guestuser

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func image(t *testing.T, passwd, group string) string {
	t.Helper()
	root := t.TempDir()
	for p, data := range map[string]string{
		"etc/passwd": passwd, "etc/group": group, "etc/shadow": "root:*:19000:0:99999:7:::\n",
		"etc/skel/.bashrc": "# skel\n", "bin/bash": "",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const debianPasswd = "root:x:0:0:root:/root:/bin/bash\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
const debianGroup = "root:x:0:\nnogroup:x:65534:\n"

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnsureAddsUserGroupShadowAndHome(t *testing.T) {
	root := image(t, debianPasswd, debianGroup)
	u := User{Name: "agent", UID: 1000, GID: 1000}
	now := time.Unix(20000*86400, 0)
	changed, err := Ensure(root, u, now)
	if err != nil || !changed {
		t.Fatalf("Ensure = %v, %v", changed, err)
	}
	if got := read(t, root+"/etc/passwd"); !strings.HasSuffix(got, "agent:x:1000:1000::/home/agent:/bin/bash\n") || !strings.HasPrefix(got, debianPasswd) {
		t.Errorf("passwd:\n%s", got)
	}
	if got := read(t, root+"/etc/group"); !strings.HasSuffix(got, "agent:x:1000:\n") {
		t.Errorf("group:\n%s", got)
	}
	if got := read(t, root+"/etc/shadow"); !strings.HasSuffix(got, "agent:!:20000:0:99999:7:::\n") {
		t.Errorf("shadow:\n%s", got)
	}
	if got := read(t, root+"/home/agent/.bashrc"); got != "# skel\n" {
		t.Errorf(".bashrc %q", got)
	}
	// A second start changes nothing.
	if changed, err := Ensure(root, u, now); err != nil || changed {
		t.Fatalf("second Ensure = %v, %v", changed, err)
	}
	if strings.Count("\n"+read(t, root+"/etc/passwd"), "\nagent:") != 1 {
		t.Error("user added twice")
	}
	if _, err := os.Stat(root + "/etc/passwd.lazaret-tmp"); err == nil {
		t.Error("temporary file left")
	}
}

func TestEnsureConflicts(t *testing.T) {
	// The node image convention: uid 1000 is "node".
	root := image(t, debianPasswd+"node:x:1000:1000::/home/node:/bin/bash\n", debianGroup+"node:x:1000:\n")
	_, err := Ensure(root, User{Name: "agent", UID: 1000, GID: 1000}, time.Now())
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `set user = "node"`) {
		t.Errorf("uid taken: %v", err)
	}
	_, err = Ensure(root, User{Name: "node", UID: 1001, GID: 1001}, time.Now())
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "set user_id = 1000") {
		t.Errorf("name with another uid: %v", err)
	}
	// The image's own user with the configured uid is used as it is.
	if _, err := Ensure(root, User{Name: "node", UID: 1000, GID: 1000}, time.Now()); err != nil {
		t.Errorf("existing user: %v", err)
	}
	if strings.Count("\n"+read(t, root+"/etc/passwd"), "\nnode:") != 1 {
		t.Error("existing user added again")
	}
}

func TestEnsureReusesGroupOfGID(t *testing.T) {
	root := image(t, debianPasswd, debianGroup+"users2:x:1000:\n")
	if _, err := Ensure(root, User{Name: "agent", UID: 1000, GID: 1000}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(read(t, root+"/etc/group"), "agent:") {
		t.Error("a second group for gid 1000 was added")
	}
}

func TestParse(t *testing.T) {
	u, err := Parse("agent:1000:1000")
	if err != nil || u != (User{"agent", 1000, 1000}) || u.String() != "agent:1000:1000" {
		t.Errorf("Parse = %v, %v", u, err)
	}
	for _, bad := range []string{"", "agent", "agent:0:0", "agent:x:1", ":1:1", "a:1:1:1"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestEnsureAdoptsRootOwnedHome: a bind beneath the home (a profile path
// ~/.claude) makes its mount-point chain exist root-owned before the init
// runs; the home is then given to the user, /etc/skel fills what is
// missing, and the mount point is left as it is.
func TestEnsureAdoptsRootOwnedHome(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns to uid 1000: run it as root (like the other unit tests)")
	}
	root := image(t, debianPasswd, debianGroup)
	if err := os.MkdirAll(root+"/home/agent/.claude", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/home/agent/.claude/.credentials.json", []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(root+"/etc/skel/.claude", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+"/etc/skel/.claude/x", []byte("skel"), 0o644); err != nil {
		t.Fatal(err)
	}
	u := User{Name: "agent", UID: 1000, GID: 1000}
	if changed, err := Ensure(root, u, time.Now()); err != nil || !changed {
		t.Fatalf("Ensure = %v, %v", changed, err)
	}
	st, err := os.Lstat(root + "/home/agent")
	if err != nil {
		t.Fatal(err)
	}
	if uid, gid := ownerOf(st); uid != 1000 || gid != 1000 || st.Mode().Perm() != 0o750 {
		t.Fatalf("home %d:%d %v, want 1000:1000 0750", uid, gid, st.Mode())
	}
	if got := read(t, root+"/home/agent/.bashrc"); got != "# skel\n" {
		t.Errorf(".bashrc %q", got)
	}
	if _, err := os.Lstat(root + "/home/agent/.claude/x"); err == nil {
		t.Error("skel copied into the existing mount point")
	}
	if got := read(t, root+"/home/agent/.claude/.credentials.json"); got != "{}" {
		t.Errorf("mount point content changed: %q", got)
	}
	// The user's own home is never touched again.
	os.Remove(root + "/home/agent/.bashrc")
	if changed, err := Ensure(root, u, time.Now()); err != nil || changed {
		t.Fatalf("second Ensure = %v, %v", changed, err)
	}
	if _, err := os.Lstat(root + "/home/agent/.bashrc"); err == nil {
		t.Error("an owned home refilled from /etc/skel")
	}
}
