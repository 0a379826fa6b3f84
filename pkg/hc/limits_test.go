package hc

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHostMemTotal(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "meminfo")
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	if got := hostMemTotal(write("MemTotal:       24683548 kB\nMemFree: 1 kB\n")); got != 24683548<<10 {
		t.Fatalf("MemTotal = %d", got)
	}
	for _, bad := range []string{"", "MemTotal: lots kB\n", "MemTotal: 12 MB\n", "MemFree: 1 kB\n"} {
		if got := hostMemTotal(write(bad)); got != 0 {
			t.Errorf("%q: %d, want 0 (unknown)", bad, got)
		}
	}
	if hostMemTotal(filepath.Join(dir, "absent")) != 0 {
		t.Error("absent file: want 0")
	}
	if hostMemTotal("/proc/meminfo") == 0 {
		t.Error("this host's /proc/meminfo has no MemTotal")
	}
}

func TestParseRunscStats(t *testing.T) {
	// As the pinned runsc prints it without cgroups.
	out := `{"type":"stats","id":"lazaret-x-5","data":{"cpu":{"usage":{"total":27492093526444}},"memory":{"usage":{"limit":0,"usage":9654272,"failcnt":0},"swap":{"limit":0,"failcnt":0}},"pids":{"current":9}}}`
	mem, tasks, err := parseRunscStats([]byte(out))
	if err != nil || mem != 9654272 || tasks != 9 {
		t.Fatalf("parse: %d %d %v", mem, tasks, err)
	}
	if _, _, err := parseRunscStats([]byte("not json")); err == nil {
		t.Fatal("garbage parsed")
	}
}
