package hostcheck

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// hostBuild is a build that is on no embedded list.
var hostBuild = Uname{Release: "6.18.44-fc-v1045", Version: "#1 SMP PREEMPT_DYNAMIC @0", Machine: "x86_64"}

func testRecord(u Uname) Record {
	return Record{Release: u.Release, Version: u.Version, Machine: u.Machine, BootID: "7007d623-d5cd-4a3b-8fb4-ed0c4b9a2ade",
		QualifiedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Lazaret: "v-test", Suite: "kernel-qualification/v1", Output: "qualification: PASSED\n"}
}

// recordHost is good() running hostBuild with records read from dir
// (trusted for the test's own uid).
func recordHost(dir string) Host {
	h := good()
	h.Uname = func() (Uname, error) { return hostBuild, nil }
	h.Records = func(w []string) RecordSet {
		return ReadRecords([]RecordDir{{Path: dir, Owner: os.Getuid(), Scope: ScopeUser}}, w)
	}
	return h
}

func recordDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "lazaret", "kernels.d")
}

func TestHostRecordQualifies(t *testing.T) {
	dir := recordDir(t)
	h := recordHost(dir)
	if err := h.Kernel(); !errors.Is(err, errdefs.ErrUnsupportedHost) || !strings.Contains(err.Error(), "run `lazaret kernel qualify` once") {
		t.Fatalf("no record: %v", err)
	}
	path, err := WriteRecord(RecordDir{Path: dir, Owner: os.Getuid()}, testRecord(hostBuild))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != dir || !strings.HasPrefix(filepath.Base(path), "6.18.44-fc-v1045-") {
		t.Fatalf("record written at %s", path)
	}
	q, err := h.KernelQualification()
	if err != nil {
		t.Fatal(err)
	}
	if q.Source != path || q.Record == nil || q.Record.Lazaret != "v-test" || q.Record.Output != "qualification: PASSED\n" {
		t.Fatalf("qualification %+v", q)
	}
	if d := q.Describe(); !strings.Contains(d, path) || !strings.Contains(d, "2026-12-01") {
		t.Fatalf("describe: %s", d)
	}
	// The embedded list still qualifies its builds without any record.
	h.Uname = func() (Uname, error) { return qualifiedTestKernel, nil }
	if q, err := h.KernelQualification(); err != nil || q.Record != nil || q.Source != embeddedSource {
		t.Fatalf("embedded: %+v %v", q, err)
	}
}

func TestRecordForAnotherBuildIsNotUsed(t *testing.T) {
	dir := recordDir(t)
	other := hostBuild
	other.Version += " rebuilt"
	p, err := WriteRecord(RecordDir{Path: dir, Owner: os.Getuid()}, testRecord(other))
	if err != nil {
		t.Fatal(err)
	}
	err = recordHost(dir).Kernel()
	if !errors.Is(err, errdefs.ErrUnsupportedHost) || !strings.Contains(err.Error(), "not used: "+p+" is for build 6.18.44-fc-v1045 #1 SMP PREEMPT_DYNAMIC @0 rebuilt") {
		t.Fatalf("got %v", err)
	}
}

// TestUntrustedRecordsAreRefused: a record in a group- or world-writable
// place, a writable record, a newer or broken record, and a record inside
// a tree the sandbox writes are each refused with the reason and the fix.
func TestUntrustedRecordsAreRefused(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir, file string) []string
		want   string
	}{
		{"group-writable directory", func(t *testing.T, dir, file string) []string { os.Chmod(dir, 0o775); return nil }, "chmod go-w " + "<dir>"},
		{"world-writable directory", func(t *testing.T, dir, file string) []string { os.Chmod(dir, 0o777); return nil }, "chmod go-w <dir>"},
		{"world-writable parent", func(t *testing.T, dir, file string) []string { os.Chmod(filepath.Dir(dir), 0o757); return nil }, "chmod go-w <parent>"},
		{"group-writable record", func(t *testing.T, dir, file string) []string { os.Chmod(file, 0o664); return nil }, "chmod go-w <file>"},
		{"symlinked record", func(t *testing.T, dir, file string) []string {
			real := filepath.Join(t.TempDir(), "real.json")
			b, _ := os.ReadFile(file)
			os.WriteFile(real, b, 0o644)
			os.Remove(file)
			os.Symlink(real, file)
			return nil
		}, "symbolic link"},
		{"newer format", func(t *testing.T, dir, file string) []string {
			os.WriteFile(file, []byte(`{"format": 2, "release": "x"}`), 0o644)
			return nil
		}, "has format 2, newer than this Lazaret reads (1): upgrade Lazaret"},
		{"not JSON", func(t *testing.T, dir, file string) []string {
			os.WriteFile(file, []byte("release=x"), 0o644)
			return nil
		}, "is not valid JSON"},
		{"incomplete", func(t *testing.T, dir, file string) []string {
			os.WriteFile(file, []byte(`{"format": 1}`), 0o644)
			return nil
		}, "is incomplete"},
		{"inside the workspace", func(t *testing.T, dir, file string) []string { return []string{filepath.Dir(filepath.Dir(dir))} }, "which the sandbox can write"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := recordDir(t)
			file, err := WriteRecord(RecordDir{Path: dir, Owner: os.Getuid()}, testRecord(hostBuild))
			if err != nil {
				t.Fatal(err)
			}
			defer os.Chmod(filepath.Dir(dir), 0o755)
			h := recordHost(dir)
			h.SandboxWritable = c.mutate(t, dir, file)
			want := strings.NewReplacer("<dir>", dir, "<parent>", filepath.Dir(dir), "<file>", file).Replace(c.want)
			err = h.Kernel()
			if !errors.Is(err, errdefs.ErrUnsupportedHost) || !strings.Contains(err.Error(), "refused: ") || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "lazaret kernel qualify") {
				t.Fatalf("got %v\nwant a refusal naming %q", err, want)
			}
		})
	}
}

func TestRecordDirs(t *testing.T) {
	env := map[string]string{"HOME": "/home/dev"}
	get := func(k string) string { return env[k] }
	dirs := RecordDirs(get, 1000)
	if len(dirs) != 2 || dirs[0].Path != "/etc/lazaret/kernels.d" || dirs[0].Owner != 0 || dirs[1].Path != "/home/dev/.config/lazaret/kernels.d" || dirs[1].Owner != 1000 {
		t.Fatalf("dirs %+v", dirs)
	}
	env["XDG_CONFIG_HOME"] = "/xdg"
	if d := RecordDirs(get, 1000); d[1].Path != "/xdg/lazaret/kernels.d" {
		t.Fatalf("XDG: %+v", d)
	}
	env["XDG_CONFIG_HOME"] = "relative" // ignored, as the XDG spec says
	if d := RecordDirs(get, 1000); d[1].Path != "/home/dev/.config/lazaret/kernels.d" {
		t.Fatalf("relative XDG: %+v", d)
	}
	if d := RecordDirs(get, 0); len(d) != 1 {
		t.Fatalf("root reads only the system records: %+v", d)
	}
}

func TestRecordFileName(t *testing.T) {
	a := RecordFileName(hostBuild)
	b := hostBuild
	b.Version += "x"
	if a == RecordFileName(b) || strings.ContainsAny(a, " #/") || !strings.HasSuffix(a, ".json") {
		t.Fatalf("names %s %s", a, RecordFileName(b))
	}
	if n := RecordFileName(Uname{Release: "../../x y", Version: "v", Machine: "m"}); strings.Contains(n, "/") {
		t.Fatalf("unsafe name %s", n)
	}
}

// TestAllButQualificationReadsNoRecord: the early checks of `lazaret run`
// refuse what no record can lift (an old kernel) but never read a record.
func TestAllButQualificationReadsNoRecord(t *testing.T) {
	h := good()
	h.Uname = func() (Uname, error) { return hostBuild, nil }
	h.Records = func([]string) RecordSet { t.Fatal("records read by the early checks"); return RecordSet{} }
	if err := h.AllButQualification(); err != nil {
		t.Fatal(err)
	}
	h.Uname = func() (Uname, error) { return Uname{"6.8.0", "#1", "x86_64"}, nil }
	if err := h.AllButQualification(); !errors.Is(err, errdefs.ErrUnsupportedHost) || !strings.Contains(err.Error(), "upgrade the kernel") {
		t.Fatalf("old kernel: %v", err)
	}
}
