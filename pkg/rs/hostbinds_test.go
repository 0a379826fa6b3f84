package rs

import (
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/ocispec"
)

func bindMount(dst, src string, opts ...string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: opts}
}

// TestPlanHostBinds: a host-side bind lands beneath the source of the last
// rbind of the same access enclosing it, as runsc would have resolved it;
// any other shape is refused (the coordinator built the spec).
func TestPlanHostBinds(t *testing.T) {
	base := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		bindMount("/etc", "/b/anchors/etc", "rbind", "rw"),
		bindMount("/.lazaret", "/r/control", "rbind", "ro"),
		bindMount("/.lazaret/credentials/sandbox.key", "/r/credentials/sandbox.key", "bind", "ro"),
		bindMount("/etc/hosts", "/r/etc/hosts", "bind", "rw"),
		bindMount("/.lazaret/mailbox/results", "/r/mailbox/results", "bind", "ro", "nosuid", "nodev", "noexec"),
	}
	sp := &specs.Spec{Mounts: base}
	plan, err := planHostBinds(sp, []string{"/.lazaret/credentials/sandbox.key", "/etc/hosts"})
	if err != nil {
		t.Fatal(err)
	}
	want := []hostBind{
		{index: 3, source: "/r/credentials/sandbox.key", dir: "/r/control", rel: "credentials/sandbox.key", readOnly: true},
		{index: 4, source: "/r/etc/hosts", dir: "/b/anchors/etc", rel: "hosts"},
	}
	if len(plan) != len(want) || plan[0] != want[0] || plan[1] != want[1] {
		t.Errorf("plan %+v, want %+v", plan, want)
	}
	// A volume at /etc mounted after the anchor encloses /etc/hosts instead.
	withVolume := append(append([]specs.Mount{}, base[:2]...), bindMount("/etc", "/home/dev/etc", "rbind", "rw"))
	withVolume = append(withVolume, base[2:]...)
	if plan, err := planHostBinds(&specs.Spec{Mounts: withVolume}, []string{"/etc/hosts"}); err != nil || plan[0].dir != "/home/dev/etc" {
		t.Errorf("enclosing mount: %+v %v", plan, err)
	}
	bad := map[string]func() []specs.Mount{
		"results (nosuid, noexec)": func() []specs.Mount { return base },
		"missing":                  func() []specs.Mount { return base },
		"twice":                    func() []specs.Mount { return append(append([]specs.Mount{}, base...), base[4]) },
		"rw beneath ro": func() []specs.Mount {
			m := append([]specs.Mount{}, base...)
			m[1].Options = []string{"rbind", "ro"}
			return m
		},
		"beneath a bind that is not recursive": func() []specs.Mount {
			m := append([]specs.Mount{}, base...)
			m[1].Options = []string{"bind", "rw"}
			return m
		},
		"enclosing mount after it": func() []specs.Mount {
			return []specs.Mount{base[4], base[1]}
		},
		"relative source": func() []specs.Mount {
			m := append([]specs.Mount{}, base...)
			m[4].Source = "r/etc/hosts"
			return m
		},
	}
	for name, mounts := range bad {
		dest := "/etc/hosts"
		switch name {
		case "results (nosuid, noexec)":
			dest = ocispec.MailboxResultsDir
		case "missing":
			dest = "/etc/hostname"
		}
		if _, err := planHostBinds(&specs.Spec{Mounts: mounts()}, []string{dest}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestHostSideBindsOfTheSpec: the destinations the coordinator names are
// exactly the spec's plain single-file binds, and each plans.
func TestHostSideBindsOfTheSpec(t *testing.T) {
	sb := ocispec.Sandbox{
		Workspace:     "/home/dev/project",
		ControlSource: "/run/user/1000/lazaret/d/control",
		NetNSPath:     "/proc/1/ns/net",
		Anchors:       []ocispec.Anchor{{Source: "/run/user/1000/lazaret/d/bundle/anchors/etc", Target: "/etc"}},
		ControlFiles:  []ocispec.ControlFile{{Source: "/run/user/1000/lazaret/d/credentials/sandbox.key", Target: ocispec.CredentialsDir + "/sandbox.key"}},
		EtcFiles: map[string]string{
			"/etc/resolv.conf": "/run/user/1000/lazaret/d/etc/resolv.conf",
			"/etc/hosts":       "/run/user/1000/lazaret/d/etc/hosts",
			"/etc/hostname":    "/run/user/1000/lazaret/d/etc/hostname",
		},
	}
	sp, err := ocispec.Spec(sb, ocispec.Process{Args: []string{ocispec.InitPath, ocispec.InitArg}, Cwd: "/"})
	if err != nil {
		t.Fatal(err)
	}
	dests := ocispec.HostSideBinds(sb)
	if len(dests) != 4 {
		t.Fatalf("host-side binds %v", dests)
	}
	plan, err := planHostBinds(sp, dests)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range plan {
		if b.dir != sb.ControlSource && b.dir != sb.Anchors[0].Source {
			t.Errorf("%+v beneath neither the control source nor the /etc anchor", b)
		}
	}
	// Without the /etc anchor (default_persistent_paths = false) the name-service
	// files stay runsc's: only the key is named, and it plans.
	sb.Anchors = nil
	if sp, err = ocispec.Spec(sb, ocispec.Process{Args: []string{ocispec.InitPath, ocispec.InitArg}, Cwd: "/"}); err != nil {
		t.Fatal(err)
	}
	dests = ocispec.HostSideBinds(sb)
	if len(dests) != 1 || dests[0] != ocispec.CredentialsDir+"/sandbox.key" {
		t.Fatalf("host-side binds without anchors %v", dests)
	}
	if _, err := planHostBinds(sp, dests); err != nil {
		t.Fatal(err)
	}
}
