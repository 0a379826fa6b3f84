package network

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestHelperOutputBecomesRecords: what the connectivity helper writes is
// logged line by line — slirp4netns's routine banner at debug level, any
// other line (an error) at info — and an over-long line is cut, not lost
// with the lines after it.
func TestHelperOutputBecomesRecords(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		logHelperOutput(log, r)
	}()
	long := strings.Repeat("x", helperLineMax+100)
	w.WriteString("Starting slirp\n* MTU:             65520\n\nslirp4netns: cannot open tap: permission denied\n" + long + "\nafter the long line")
	w.Close()
	<-done
	type rec struct{ Level, Msg, Line string }
	var got []rec
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var x rec
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatalf("not a record: %q", l)
		}
		got = append(got, x)
	}
	want := []rec{
		{"DEBUG", "connectivity helper output", "Starting slirp"},
		{"DEBUG", "connectivity helper output", "* MTU:             65520"},
		{"INFO", "connectivity helper output", "slirp4netns: cannot open tap: permission denied"},
		{"INFO", "connectivity helper output", long[:helperLineMax]},
		{"INFO", "connectivity helper output", "after the long line"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: got %.80q, want %.80q", i, got[i], want[i])
		}
	}
}
