package config

import (
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	good := map[string]uint64{"512MiB": 512 << 20, "8GiB": 8 << 30, "1TiB": 1 << 40, "4096B": 4096, "64KiB": 64 << 10, " 2GiB ": 2 << 30}
	for in, want := range good {
		if n, err := ParseSize(in); err != nil || n != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"8", "8GB", "8G", "1.5GiB", "-1GiB", "GiB", "", "99999999999999TiB"} {
		if n, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, n)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[uint64]string{8 << 30: "8GiB", 1536 << 20: "1536MiB", 100: "100B", 1 << 40: "1TiB", 1<<30 + 1: "1073741825B"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLimitsParseAndLayer(t *testing.T) {
	c := mustParse(t, `
[defaults]
limits.processes = 2000
limits.memory = "8GiB"

[profiles.web]
image = "debian"
[profiles.web.limits]
memory = "512MiB"
open_files = 1024
`)
	p, err := c.Profile("web")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Limits{Memory: 512 << 20, Processes: 2000, OpenFiles: 1024}); p.Limits != want {
		t.Fatalf("limits = %+v, want %+v", p.Limits, want)
	}
	d, _ := c.Profile("default")
	if want := (Limits{Memory: 8 << 30, Processes: 2000}); d.Limits != want {
		t.Fatalf("default profile limits = %+v, want %+v ([defaults] applies)", d.Limits, want)
	}
}

func TestLimitsErrorsNameTheKey(t *testing.T) {
	for src, want := range map[string]string{
		`limits.memory = 512`:         "profiles.web.limits.memory: must be a size string",
		`limits.memory = "512"`:       "has no unit",
		`limits.memory = "8GB"`:       "has no unit",
		`limits.memory = "64MiB"`:     "below the minimum of 128MiB",
		`limits.processes = 8`:        "profiles.web.limits.processes: must be a whole number of guest tasks",
		`limits.processes = 100000`:   "from 16 to 65536",
		`limits.processes = "many"`:   "from 16 to 65536, not many",
		`limits.open_files = 10`:      "profiles.web.limits.open_files: must be a whole number of open files per guest process from 64 to 1048576",
		`limits.open_files = 2000000`: "from 64 to 1048576",
		`limits.cpu = 2`:              "limits.cpu",
		`limits = "lots"`:             "profiles.web.limits",
	} {
		_, err := parse(t, "[profiles.web]\n"+src+"\n")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to contain %q", src, err, want)
		}
	}
}

func TestLimitsEffectiveDefaults(t *testing.T) {
	got := Limits{}.Effective(24 << 30)
	if want := (Limits{Memory: 12 << 30, Processes: DefaultProcesses, OpenFiles: DefaultOpenFiles}); got != want {
		t.Fatalf("defaults on a 24GiB host = %+v, want %+v", got, want)
	}
	if got := (Limits{}).Effective(0); got.Memory != fallbackMemory {
		t.Fatalf("unknown host memory: memory limit %d, want the fallback %d", got.Memory, fallbackMemory)
	}
	set := Limits{Memory: 1 << 30, Processes: 256, OpenFiles: 512}
	if got := set.Effective(24 << 30); got != set {
		t.Fatalf("configured limits changed by Effective: %+v", got)
	}
}

// Limits enter the fingerprint only when configured: a profile without
// them keeps its fingerprint, a configured limit changes it and
// round-trips through the canonical encoding, and Diff names it.
func TestLimitsFingerprint(t *testing.T) {
	plain := mustParse(t, "[profiles.web]\nimage = \"debian\"\n")
	limited := mustParse(t, "[profiles.web]\nimage = \"debian\"\nlimits.memory = \"1GiB\"\nlimits.processes = 256\n")
	a, _ := plain.Profile("web")
	b, _ := limited.Profile("web")
	if strings.Contains(string(a.Canonical()), "limits") {
		t.Fatalf("a profile without limits has them in its canonical form: %s", a.Canonical())
	}
	if a.Fingerprint() == b.Fingerprint() {
		t.Fatal("configured limits do not change the fingerprint")
	}
	back, err := FromCanonical(b.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	if back.Limits != b.Limits || back.Fingerprint() != b.Fingerprint() {
		t.Fatalf("limits lost in the canonical round trip: %+v", back.Limits)
	}
	diff := strings.Join(Diff(a, b), "; ")
	for _, want := range []string{"limits.memory: default → 1GiB", "limits.processes: default → 256"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff %q lacks %q", diff, want)
		}
	}
}
