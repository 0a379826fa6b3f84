package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// tree makes dir/{home/.config/lazaret/config.toml, ws/, data/} and returns
// their paths (dir resolved, as t.TempDir may sit under a symlink).
func tree(t *testing.T) (root, cfg, ws, data string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(root, "home", ".config", "lazaret", "config.toml")
	ws = filepath.Join(root, "home", "ws")
	data = filepath.Join(root, "data")
	for _, d := range []string{filepath.Dir(cfg), ws, data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(cfg, []byte("[profiles.a]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return root, cfg, ws, data
}

func refused(t *testing.T, err error, subs ...string) {
	t.Helper()
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("not refused: %v", err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
}

func TestConfineAcceptsSeparatePaths(t *testing.T) {
	_, cfg, ws, data := tree(t)
	link := filepath.Join(filepath.Dir(ws), "ws-link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	c, err := Confine(cfg, []Mount{{Source: link, Target: "/workspace", Name: "workspace"}, {Source: data + "/./", Target: "/data", ReadOnly: true, Name: "volume /data"}})
	if err != nil {
		t.Fatal(err)
	}
	if c.ConfigPath != cfg || c.Mounts[0].Source != ws || c.Mounts[1].Source != data || !c.Mounts[1].ReadOnly {
		t.Fatalf("%+v", c)
	}
	// The config file never appears as or under a returned mount source.
	for _, m := range c.Mounts {
		if m.Source == cfg || under(cfg, m.Source) {
			t.Fatalf("config exposed by %+v", m)
		}
	}
	// No configuration file: only mounts are canonicalized.
	c, err = Confine("", []Mount{{Source: link, Name: "workspace"}})
	if err != nil || c.Mounts[0].Source != ws || len(c.ConfigChain) != 0 {
		t.Fatalf("%v %+v", err, c)
	}
}

func TestConfineRefusesConfigInsideMount(t *testing.T) {
	_, _, ws, _ := tree(t)
	inWS := filepath.Join(ws, ".lazaret.toml")
	os.WriteFile(inWS, nil, 0o600)
	_, err := Confine(inWS, []Mount{{Source: ws, Target: "/workspace", Name: "workspace"}})
	refused(t, err, "configuration file "+inWS, "is inside the workspace source "+ws, "move the configuration")
}

func TestConfineRefusesConfigAsMountOrAncestor(t *testing.T) {
	root, cfg, _, _ := tree(t)
	_, err := Confine(cfg, []Mount{{Source: cfg, Target: "/cfg", Name: "volume /cfg"}})
	refused(t, err, "is the volume /cfg source")
	// A mount of the configuration's directory (or any ancestor).
	_, err = Confine(cfg, []Mount{{Source: filepath.Join(root, "home"), Target: "/h", Name: "volume /h"}})
	refused(t, err, "is inside the volume /h source")
	// A configuration "file" that is a directory above a mount source.
	dirCfg := filepath.Join(root, "cfgdir")
	os.MkdirAll(filepath.Join(dirCfg, "sub"), 0o700)
	c := &Confinement{ConfigPath: dirCfg, ConfigChain: []string{dirCfg}}
	refused(t, c.Allows("volume /x", filepath.Join(dirCfg, "sub")), "is an ancestor of the volume /x source")
}

func TestConfineRefusesMountViaSymlinkedConfig(t *testing.T) {
	_, cfg, ws, _ := tree(t)
	// The configuration path goes through a symlink inside the workspace:
	// the sandbox could retarget it, so it is refused even though the
	// resolved file is outside.
	link := filepath.Join(ws, "cfg-link")
	if err := os.Symlink(cfg, link); err != nil {
		t.Fatal(err)
	}
	_, err := Confine(link, []Mount{{Source: ws, Target: "/workspace", Name: "workspace"}})
	refused(t, err, "a symbolic link on the way to the configuration file "+cfg)
	// And a config path whose resolved file is in the workspace, reached
	// through a symlink outside.
	real := filepath.Join(ws, "real.toml")
	os.WriteFile(real, nil, 0o600)
	outside := filepath.Join(filepath.Dir(cfg), "outside-link.toml")
	os.Symlink(real, outside)
	_, err = Confine(outside, []Mount{{Source: ws, Target: "/workspace", Name: "workspace"}})
	refused(t, err, "configuration file "+real)
	// A relative symlink chain.
	rel := filepath.Join(filepath.Dir(cfg), "rel.toml")
	os.Symlink("../../ws/real.toml", rel)
	canon, chain, err := resolveChain(rel)
	if err != nil || canon != real || len(chain) != 2 || chain[0] != rel {
		t.Fatalf("chain %v %v %v", canon, chain, err)
	}
}

func TestConfineRefusesHardLinkedConfig(t *testing.T) {
	_, cfg, ws, _ := tree(t)
	if err := os.Link(cfg, filepath.Join(ws, "hidden.toml")); err != nil {
		t.Fatal(err)
	}
	_, err := Confine(cfg, []Mount{{Source: ws, Target: "/workspace", Name: "workspace"}})
	refused(t, err, "has 2 hard links")
}

func TestConfineMissingSources(t *testing.T) {
	_, cfg, _, data := tree(t)
	_, err := Confine(cfg, []Mount{{Source: filepath.Join(data, "nope"), Name: "volume /nope"}})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "volume /nope source") {
		t.Fatalf("%v", err)
	}
	if _, err := Confine(filepath.Join(data, "nope.toml"), nil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("%v", err)
	}
}

func TestProfileMounts(t *testing.T) {
	c := mustParse(t, "[[profiles.a.volumes]]\nsource = \"/srv/x\"\ntarget = \"/x\"\nmode = \"rw\"\n")
	a, _ := c.Profile("a")
	ms := a.Mounts("/home/dev/ws")
	if len(ms) != 2 || ms[0].Target != "/workspace" || ms[0].ReadOnly || ms[1].Source != "/srv/x" || ms[1].ReadOnly {
		t.Fatalf("%+v", ms)
	}
}

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/a/b", "/a", true}, {"/a", "/a", false}, {"/ab", "/a", false}, {"/a", "/", true}, {"/", "/", false},
	} {
		if under(c.p, c.dir) != c.want {
			t.Errorf("under(%q, %q)", c.p, c.dir)
		}
	}
}
