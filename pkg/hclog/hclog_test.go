package hclog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `time=2026-12-02T02:30:49.200Z level=INFO msg="host coordinator process started" role=hc pid=6711
time=2026-12-02T02:30:49.211Z level=INFO msg="Found 0 WALs" role=hc pid=6711 domain_id=d4 generation=0 component=domain-store
time=2026-12-02T02:30:49.275Z level=INFO msg="host coordinator started" role=hc pid=6711 domain_id=d4 generation=1 workspace="/tmp/a b" profile=default
sent tapfd=7 for tap0
time=2026-12-02T02:30:49.300Z level=DEBUG msg="client enrolled" role=hc pid=6711 generation=1 client_cli_id=x
time=2026-12-02T02:31:06.502Z level=INFO msg="tearing down" role=hc pid=6711 domain_id=d4 generation=1
time=2026-12-02T02:32:00.000Z level=INFO msg="host coordinator process started" role=hc pid=7000
time=2026-12-02T02:32:00.100Z level=ERROR msg="start failed" role=hc pid=7000 err="no \"image\" here"
time=2026-12-02T02:33:00.000Z level=INFO msg="host coordinator process started" role=hc pid=7100
time=2026-12-02T02:33:00.100Z level=INFO msg="host coordinator started" role=hc pid=7100 generation=2
`

func parse(t *testing.T, text string) []Part {
	t.Helper()
	var parts []Part
	for _, l := range strings.Split(text, "\n") {
		parts = AddLine(parts, l)
	}
	return parts
}

func TestPartsByMarker(t *testing.T) {
	parts := parse(t, sample)
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3: %+v", len(parts), parts)
	}
	want := []struct {
		gen  uint64
		pid  int
		recs int
	}{{1, 6711, 6}, {0, 7000, 2}, {2, 7100, 2}}
	for i, w := range want {
		p := parts[i]
		if p.Generation != w.gen || p.CoordinatorPID != w.pid || len(p.Records) != w.recs {
			t.Errorf("part %d: generation %d pid %d %d records, want %+v", i, p.Generation, p.CoordinatorPID, len(p.Records), w)
		}
	}
	// Lines before any marker (an old log) form a part of their own.
	old := parse(t, "time=2026-01-01T00:00:00Z level=INFO msg=x role=hc generation=5\n")
	if len(old) != 1 || old[0].Generation != 5 {
		t.Errorf("old log: %+v", old)
	}
}

func TestParseLineAndVisibility(t *testing.T) {
	parts := parse(t, sample)
	recs := parts[0].Records
	wal, started, plain, debug := recs[1], recs[2], recs[3], recs[4]
	if !wal.Internal || Visible(wal, false) || !Visible(wal, true) {
		t.Errorf("pebble's message is not internal-only: %+v", wal)
	}
	if debug.Level != "DEBUG" || Visible(debug, false) || !Visible(debug, true) {
		t.Errorf("debug line visibility: %+v", debug)
	}
	if !plain.Plain || plain.Msg != "sent tapfd=7 for tap0" || !Visible(plain, false) {
		t.Errorf("plain line: %+v", plain)
	}
	if started.Role != "hc" || started.Level != "INFO" || started.Msg != "host coordinator started" || started.Time.IsZero() {
		t.Errorf("structured line: %+v", started)
	}
	if len(started.Attrs) != 2 || started.Attrs[0] != (Attr{"workspace", "/tmp/a b"}) || started.Attrs[1] != (Attr{"profile", "default"}) {
		t.Errorf("attrs (pid, domain_id, generation left out): %+v", started.Attrs)
	}
	got := Format(started)
	if !strings.Contains(got, "INFO  hc          host coordinator started workspace=\"/tmp/a b\" profile=default") {
		t.Errorf("Format: %q", got)
	}
	failed := parts[1].Records[1]
	if len(failed.Attrs) != 1 || failed.Attrs[0].Value != `no "image" here` {
		t.Errorf("quoted value: %+v", failed.Attrs)
	}
	// A line that only looks structured stays plain.
	if r := ParseLine(`time=x level=INFO msg="unterminated`); !r.Plain {
		t.Errorf("malformed line parsed: %+v", r)
	}
}

func TestOpenForStartRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hc.log")
	os.WriteFile(path, []byte("first\n"), 0o600)
	f, err := OpenForStart(path)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("second\n")
	f.Close()
	if b, _ := os.ReadFile(path); string(b) != "first\nsecond\n" {
		t.Errorf("not appended: %q", b)
	}
	if _, err := os.Stat(Previous(path)); err == nil {
		t.Error("a small log was rotated")
	}
	big := make([]byte, MaxBytes+1)
	os.WriteFile(path, big, 0o600)
	f, err = OpenForStart(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, err := os.Stat(Previous(path)); err != nil || fi.Size() != MaxBytes+1 {
		t.Errorf("large log not rotated: %v", err)
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("new log: size %d mode %v", fi.Size(), fi.Mode())
	}
}
