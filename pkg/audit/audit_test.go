package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestAppendReadSince(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	l, err := Open(dir, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	l.Append(Entry{Event: EventRequest, RequestID: "r1", Argv: []string{"git", "fetch"}})
	now = now.Add(time.Hour)
	l.Append(Entry{Event: EventResult, RequestID: "r1", Outcome: "completed", ExitCode: &code})
	l.Close()
	// A torn last line (crash mid-append) is skipped.
	f, _ := os.OpenFile(filepath.Join(dir, FileName), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"v":1,"event":"req`)
	f.Close()
	fh, _ := os.Open(filepath.Join(dir, FileName))
	all, err := Read(fh, time.Time{})
	fh.Close()
	if err != nil || len(all) != 2 || all[0].V != Version {
		t.Fatalf("read: %v %+v", err, all)
	}
	if s := Format(all[1]); !strings.Contains(s, "completed exit=0") || !strings.Contains(Format(all[0]), `argv=["git","fetch"]`) {
		t.Errorf("format: %q / %q", s, Format(all[0]))
	}
	fh, _ = os.Open(filepath.Join(dir, FileName))
	later, _ := Read(fh, now)
	fh.Close()
	if len(later) != 1 || later[0].Event != EventResult {
		t.Errorf("since: %+v", later)
	}
	if st, _ := os.Stat(filepath.Join(dir, FileName)); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode())
	}
}

func TestNewerVersionRefused(t *testing.T) {
	_, err := Read(strings.NewReader(`{"v":2,"event":"request"}`+"\n"), time.Time{})
	if !errors.Is(err, errdefs.ErrRefused) {
		t.Errorf("newer version: %v", err)
	}
}
