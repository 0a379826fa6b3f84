package cli

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/hostcheck"
	"github.com/lazaret/lazaret/pkg/runsc"
)

type info struct{ mode os.FileMode }

func (i info) Name() string       { return "x" }
func (i info) Size() int64        { return 0 }
func (i info) Mode() os.FileMode  { return i.mode }
func (i info) ModTime() time.Time { return time.Time{} }
func (i info) IsDir() bool        { return false }
func (i info) Sys() any           { return nil }

// qualifiedUname is the first build in pkg/hostcheck/qualified-kernels.txt.
func qualifiedUname(t *testing.T) hostcheck.Uname {
	b, err := os.ReadFile("../../../pkg/hostcheck/qualified-kernels.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, "\t"); len(f) >= 3 && !strings.HasPrefix(line, "#") {
			return hostcheck.Uname{Release: f[0], Version: f[1], Machine: f[2]}
		}
	}
	t.Fatal("no qualified kernel registered")
	return hostcheck.Uname{}
}

// doctorFixture is a host on which every check passes; each test case
// breaks one probe.
type doctorFixture struct {
	host   hostcheck.Host
	probes hostcheck.Probes
	find   func(string) (string, error)
	files  map[string]string // ReadFile contents (sysctls, subuid)
}

func goodDoctor(t *testing.T) *doctorFixture {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	f := &doctorFixture{files: map[string]string{
		"/etc/subuid": "dev:100000:65536\n", "/etc/subgid": "dev:100000:65536\n",
		"/proc/sys/user/max_user_namespaces": "15000\n",
		"/etc/os-release":                    "NAME=\"Debian GNU/Linux\"\nID=debian\n",
	}}
	u := qualifiedUname(t)
	f.host = hostcheck.Host{
		Euid: 1001, Uid: 1001, Username: "dev",
		Uname: func() (hostcheck.Uname, error) { return u, nil },
		ReadFile: func(p string) ([]byte, error) {
			if s, ok := f.files[p]; ok {
				return []byte(s), nil
			}
			return nil, os.ErrNotExist
		},
		OpenRW:   func(string) error { return nil },
		LookPath: func(n string) (string, error) { return "/usr/bin/" + n, nil },
		Stat:     func(string) (os.FileInfo, error) { return info{mode: 0o4755 | os.ModeSetuid}, nil },
	}
	f.probes = hostcheck.Probes{
		Pidfs:        func() error { return nil },
		UserNS:       func() error { return nil },
		RunscVersion: func(string) (string, error) { return runsc.PinnedVersion, nil },
		SlirpVersion: func(string) (string, error) { return "1.2.0", nil },
		Statfs: func(string) (hostcheck.FS, error) {
			return hostcheck.FS{Type: unix.EXT4_SUPER_MAGIC, FreeBytes: 50 << 30}, nil
		},
		Domains: func() ([]hostcheck.DomainState, error) {
			return []hostcheck.DomainState{{ID: "a", LockHeld: true, RuntimeLeft: true}, {ID: "b"}}, nil
		},
	}
	f.find = func(n string) (string, error) { return "/opt/lazaret/libexec/lazaret/" + n, nil }
	return f
}

func (f *doctorFixture) run() []doctorResult {
	return doctorChecks(f.host, f.probes, f.find, domain.Roots{Storage: "/home/dev/.local/state/lazaret", Runtime: "/run/user/1001/lazaret"}, nil)
}

func TestDoctorPassesOnAGoodHost(t *testing.T) {
	rs := goodDoctor(t).run()
	if got := doctorFailures(rs); got != "" {
		t.Fatalf("failures on a good host: %s\n%+v", got, rs)
	}
	if len(rs) < 18 {
		t.Fatalf("only %d checks ran: %+v", len(rs), rs)
	}
}

// TestDoctorEachFailureNamesItsFix: each probe reporting its prerequisite
// missing fails exactly that check, with the exact remedy.
func TestDoctorEachFailureNamesItsFix(t *testing.T) {
	cases := []struct {
		name, check, fix string
		breakIt          func(*doctorFixture)
	}{
		{"root", "not root", "normal user", func(f *doctorFixture) { f.host.Euid = 0 }},
		{"old kernel", "kernel", "upgrade the kernel", func(f *doctorFixture) {
			f.host.Uname = func() (hostcheck.Uname, error) {
				return hostcheck.Uname{Release: "6.8.0", Version: "#1", Machine: "x86_64"}, nil
			}
		}},
		{"arm", "kernel", "only x86-64", func(f *doctorFixture) {
			f.host.Uname = func() (hostcheck.Uname, error) {
				return hostcheck.Uname{Release: "6.12.0", Version: "#1", Machine: "aarch64"}, nil
			}
		}},
		{"unqualified build", "kernel", "run `lazaret kernel qualify` once", func(f *doctorFixture) {
			u, _ := f.host.Uname()
			u.Version += " rebuilt"
			f.host.Uname = func() (hostcheck.Uname, error) { return u, nil }
		}},
		{"pidfs probe", "pidfs probe", "lazaret kernel qualify", func(f *doctorFixture) {
			f.probes.Pidfs = func() error { return errors.New("pidfd_open: ENOSYS") }
		}},
		{"no subuid", "subordinate ids", "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 dev", func(f *doctorFixture) {
			f.files["/etc/subuid"] = "other:1:65536\n"
		}},
		{"no newuidmap", "newuidmap/newgidmap", "apt-get install uidmap", func(f *doctorFixture) {
			f.host.LookPath = func(string) (string, error) { return "", errors.New("missing") }
		}},
		{"newuidmap not setuid", "newuidmap/newgidmap", "apt-get install --reinstall uidmap", func(f *doctorFixture) {
			f.host.Stat = func(string) (os.FileInfo, error) { return info{mode: 0o755}, nil }
		}},
		{"tun", "/dev/net/tun", "chmod 0666 /dev/net/tun", func(f *doctorFixture) {
			f.host.OpenRW = func(p string) error {
				if p == "/dev/net/tun" {
					return os.ErrPermission
				}
				return nil
			}
		}},
		{"fuse", "/dev/fuse", "chmod 0666 /dev/fuse", func(f *doctorFixture) {
			f.host.OpenRW = func(p string) error {
				if p == "/dev/fuse" {
					return os.ErrNotExist
				}
				return nil
			}
		}},
		{"runsc missing", "runsc", "make setup", func(f *doctorFixture) {
			find := f.find
			f.find = func(n string) (string, error) {
				if n == "runsc" {
					return "", errors.New("runsc not found (looked in …): run `make setup` in the Lazaret checkout")
				}
				return find(n)
			}
		}},
		{"runsc wrong version", "runsc", "not the pinned " + runsc.PinnedVersion, func(f *doctorFixture) {
			f.probes.RunscVersion = func(string) (string, error) { return "v0.0.0-20250101000000-000000000000", nil }
		}},
		{"hc missing", "lazaret-hc", "reinstall", func(f *doctorFixture) {
			find := f.find
			f.find = func(n string) (string, error) {
				if n == "lazaret-hc" {
					return "", errors.New("lazaret-hc not found: reinstall Lazaret (make build, or make install)")
				}
				return find(n)
			}
		}},
		{"userns disabled", "user namespaces", "sysctl -w user.max_user_namespaces=28633", func(f *doctorFixture) {
			f.files["/proc/sys/user/max_user_namespaces"] = "0\n"
		}},
		{"debian userns clone", "user namespaces", "sysctl -w kernel.unprivileged_userns_clone=1", func(f *doctorFixture) {
			f.files["/proc/sys/kernel/unprivileged_userns_clone"] = "0\n"
		}},
		{"ubuntu apparmor", "user namespaces", "profile lazaret_opt_lazaret_libexec_lazaret_lazaret-hc /opt/lazaret/libexec/lazaret/lazaret-hc flags=(unconfined) {\n  userns,\n}", func(f *doctorFixture) {
			f.files["/proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = "1\n"
			f.probes.UserNS = func() error { return errors.New("operation not permitted") }
		}},
		{"userns probe", "user namespaces", "cannot create an unprivileged user namespace", func(f *doctorFixture) {
			f.probes.UserNS = func() error { return errors.New("operation not permitted") }
		}},
		{"slirp missing", "slirp4netns", "apt-get install slirp4netns", func(f *doctorFixture) {
			find := f.find
			f.find = func(n string) (string, error) {
				if n == "slirp4netns" {
					return "", errors.New("missing")
				}
				return find(n)
			}
		}},
		{"slirp old", "slirp4netns", "install slirp4netns 1.0.0 or later", func(f *doctorFixture) {
			f.probes.SlirpVersion = func(string) (string, error) { return "0.4.3", nil }
		}},
		{"mmdebstrap", "mmdebstrap", "apt-get install mmdebstrap", func(f *doctorFixture) {
			find := f.find
			f.find = func(n string) (string, error) {
				if n == "mmdebstrap" {
					return "", errors.New("missing")
				}
				return find(n)
			}
		}},
		{"storage on nfs", "storage root", "set XDG_STATE_HOME to a directory on a local ext4", func(f *doctorFixture) {
			f.probes.Statfs = func(p string) (hostcheck.FS, error) {
				if strings.Contains(p, "state") {
					return hostcheck.FS{Type: 0x6969, FreeBytes: 50 << 30}, nil
				}
				return hostcheck.FS{Type: unix.TMPFS_MAGIC, FreeBytes: 1 << 30}, nil
			}
		}},
		{"storage full", "storage root", "free space there or set XDG_STATE_HOME", func(f *doctorFixture) {
			f.probes.Statfs = func(p string) (hostcheck.FS, error) {
				if strings.Contains(p, "state") {
					return hostcheck.FS{Type: unix.EXT4_SUPER_MAGIC, FreeBytes: 100 << 20}, nil
				}
				return hostcheck.FS{Type: unix.TMPFS_MAGIC, FreeBytes: 1 << 30}, nil
			}
		}},
		{"runtime on overlay", "runtime root", "set XDG_RUNTIME_DIR", func(f *doctorFixture) {
			f.probes.Statfs = func(p string) (hostcheck.FS, error) {
				if strings.Contains(p, "/run/") {
					return hostcheck.FS{Type: 0x794c7630, FreeBytes: 1 << 30}, nil
				}
				return hostcheck.FS{Type: unix.EXT4_SUPER_MAGIC, FreeBytes: 50 << 30}, nil
			}
		}},
		{"stale domain", "domains", "lazaret run -C /home/dev/p --profile claude -- true", func(f *doctorFixture) {
			f.probes.Domains = func() ([]hostcheck.DomainState, error) {
				return []hostcheck.DomainState{{ID: "abc", Profile: "claude", Workspace: "/home/dev/p", RuntimeLeft: true}}, nil
			}
		}},
		{"image missing", "image debian", "lazaret image build debian", func(f *doctorFixture) {
			stat := f.host.Stat
			f.host.Stat = func(p string) (os.FileInfo, error) {
				if strings.HasSuffix(p, "/debian/index.json") {
					return nil, os.ErrNotExist
				}
				return stat(p)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := goodDoctor(t)
			c.breakIt(f)
			rs := f.run()
			if got := doctorFailures(rs); got != c.check {
				t.Fatalf("failed checks %q, want exactly %q", got, c.check)
			}
			for _, r := range rs {
				if r.Check == c.check && !strings.Contains(r.Detail, c.fix) {
					t.Errorf("%s: remedy %q does not contain %q", r.Check, r.Detail, c.fix)
				}
			}
		})
	}
}

// TestDoctorFixesForTheDistribution: the package remedies follow
// /etc/os-release; where the distribution lacks mmdebstrap, doctor says so
// without failing (there is nothing to install).
func TestDoctorFixesForTheDistribution(t *testing.T) {
	missing := func(f *doctorFixture, names ...string) {
		find := f.find
		f.find = func(n string) (string, error) {
			for _, m := range names {
				if n == m {
					return "", errors.New("missing")
				}
			}
			return find(n)
		}
	}
	cases := []struct {
		osRelease, slirpFix, mmdebstrap string
		mmdebstrapFails                 bool
	}{
		{"NAME=\"Fedora Linux\"\nID=fedora\n", "`dnf install slirp4netns`", "mmdebstrap is not packaged for Fedora Linux: `lazaret image build debian` will not work", false},
		{"NAME=\"Rocky Linux\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n", "`dnf install slirp4netns`", "not packaged for Rocky Linux", false},
		{"NAME=\"Arch Linux\"\nID=arch\n", "`pacman -S slirp4netns`", "not packaged for Arch Linux", false},
		{"NAME=\"openSUSE Tumbleweed\"\nID=\"opensuse-tumbleweed\"\nID_LIKE=\"opensuse suse\"\n", "`zypper install slirp4netns`", "not packaged for openSUSE Tumbleweed", false},
		{"NAME=Ubuntu\nID=ubuntu\nID_LIKE=debian\n", "`apt-get install slirp4netns`", "`apt-get install mmdebstrap`", true},
	}
	for _, c := range cases {
		f := goodDoctor(t)
		f.files["/etc/os-release"] = c.osRelease
		missing(f, "slirp4netns", "mmdebstrap")
		rs := f.run()
		want := "slirp4netns"
		if c.mmdebstrapFails {
			want += ",mmdebstrap"
		}
		if got := doctorFailures(rs); got != want {
			t.Errorf("%q: failed checks %q, want %q", c.osRelease, got, want)
		}
		for _, r := range rs {
			if (r.Check == "slirp4netns" && !strings.Contains(r.Detail, c.slirpFix)) ||
				(r.Check == "mmdebstrap" && !strings.Contains(r.Detail, c.mmdebstrap)) {
				t.Errorf("%q: %s: %q", c.osRelease, r.Check, r.Detail)
			}
		}
	}
}

func TestLockedInodes(t *testing.T) {
	got := lockedInodes("1: FLOCK  ADVISORY  WRITE 1234 00:2b:5678 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 99 00:2b:42 0 EOF\n2: POSIX  ADVISORY  READ 5 fd:01:77 0 EOF\n")
	if !got[lockKey{0, 0x2b, 5678}] || !got[lockKey{0xfd, 1, 77}] || got[lockKey{0, 0x2b, 42}] {
		t.Fatalf("%v", got)
	}
}

func TestParseSlirpVersion(t *testing.T) {
	v, err := parseSlirpVersion("slirp4netns version 1.2.0\ncommit: 656041d\nlibslirp: 4.7.0\n")
	if err != nil || v != "1.2.0" {
		t.Fatalf("%q %v", v, err)
	}
	if _, err := parseSlirpVersion("garbage"); err == nil {
		t.Fatal("garbage accepted")
	}
}

// TestParseRunscVersion: the version of a runsc built by make setup (which
// records none in its build information) comes from its --version line;
// the module's own build, which says VERSION_MISSING, has none.
func TestParseRunscVersion(t *testing.T) {
	v, err := parseRunscVersion("runsc version v0.0.0-20260905035102-160fafc42237\nspec: 1.2.1\n")
	if err != nil || v != "v0.0.0-20260905035102-160fafc42237" {
		t.Fatalf("%q %v", v, err)
	}
	for _, out := range []string{"runsc version VERSION_MISSING\nspec: 1.2.1\n", "runsc version \n", "garbage"} {
		if v, err := parseRunscVersion(out); err == nil {
			t.Errorf("%q: version %q accepted", out, v)
		}
	}
}

// TestDoctorNamesTheKernelRecord: on a build qualified by a host
// qualification record, the kernel check passes and names the record; on
// the embedded list it says so.
func TestDoctorNamesTheKernelRecord(t *testing.T) {
	f := goodDoctor(t)
	u := hostcheck.Uname{Release: "6.18.44-fc-v1045", Version: "#1 SMP PREEMPT_DYNAMIC @0", Machine: "x86_64"}
	dir := t.TempDir() + "/kernels.d"
	path, err := hostcheck.WriteRecord(hostcheck.RecordDir{Path: dir, Owner: os.Getuid()}, hostcheck.Record{Release: u.Release, Version: u.Version, Machine: u.Machine,
		QualifiedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Lazaret: "v1", Suite: "kernel-qualification/v1"})
	if err != nil {
		t.Fatal(err)
	}
	f.host.Uname = func() (hostcheck.Uname, error) { return u, nil }
	f.host.Records = func(w []string) hostcheck.RecordSet {
		return hostcheck.ReadRecords([]hostcheck.RecordDir{{Path: dir, Owner: os.Getuid()}}, w)
	}
	rs := f.run()
	if got := doctorFailures(rs); got != "" {
		t.Fatalf("failed checks %q", got)
	}
	for _, r := range rs {
		if r.Check == "kernel" && !strings.Contains(r.Detail, "qualified by record "+path) {
			t.Errorf("kernel detail %q does not name the record %s", r.Detail, path)
		}
	}
	f = goodDoctor(t)
	for _, r := range f.run() {
		if r.Check == "kernel" && !strings.Contains(r.Detail, "qualified by the list built into Lazaret") {
			t.Errorf("kernel detail %q", r.Detail)
		}
	}
}
