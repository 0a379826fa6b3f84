package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

func TestDenialLogBoundedRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "network-denials.log")
	// An earlier generation left entries and a torn line.
	old := `{"v":1,"time":"2026-01-01T00:00:00Z","session":"s-old","host":"old.test","port":443,"via":"connect","reason":"r","decision":"denied"}` + "\n" + `{"v":1,"ti`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	clock := time.Date(2026, 9, 5, 12, 0, 0, 0, time.UTC)
	l, err := NewDenialLog(f, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Record(Denial{Session: "s-1", Host: "first.test", Port: 443, Via: "connect", Reason: "not in network.allow_hosts", Decision: DecisionDenied}); err != nil {
		t.Fatal(err)
	}
	ds, err := ReadDenials(path)
	if err != nil || len(ds) != 2 || ds[0].Host != "old.test" || ds[1].Host != "first.test" || !ds[1].Time.Equal(clock) || ds[1].V != 1 {
		t.Fatalf("after the torn line: %+v %v", ds, err)
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), `"time":"2026-09-05T12:00:00Z","session":"s-1","host":"first.test","port":443,"via":"connect"`) {
		t.Fatalf("line format:\n%s", raw)
	}
	// Grow it well past the bound: it never ends much beyond it and keeps
	// the newest entries.
	const n = 5000
	maxSeen, prev, rewrites := int64(0), int64(0), 0
	for i := 0; i < n; i++ {
		if err := l.Record(Denial{Session: "s-1", Host: fmt.Sprintf("h%05d.example.test", i), Port: 443, Addr: "93.184.216.34", Via: "socks", Reason: "not in network.allow_hosts", Decision: DecisionDenied}); err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		maxSeen = max(maxSeen, st.Size())
		if st.Size() < prev {
			rewrites++
			ds, err := ReadDenials(path)
			if err != nil || len(ds) > KeepDenials || ds[len(ds)-1].Host != fmt.Sprintf("h%05d.example.test", i) {
				t.Fatalf("after a rewrite: %d entries, %v", len(ds), err)
			}
		}
		prev = st.Size()
	}
	if rewrites < 2 {
		t.Fatalf("%d rewrites", rewrites)
	}
	if maxSeen > MaxDenialLogBytes+1024 {
		t.Fatalf("the log reached %d bytes", maxSeen)
	}
	ds, err = ReadDenials(path)
	if err != nil {
		t.Fatal(err)
	}
	if ds[len(ds)-1].Host != fmt.Sprintf("h%05d.example.test", n-1) {
		t.Fatalf("newest entry %+v", ds[len(ds)-1])
	}
	for i := 1; i < len(ds); i++ {
		if ds[i].Host <= ds[i-1].Host {
			t.Fatalf("entries out of order at %d: %s after %s", i, ds[i].Host, ds[i-1].Host)
		}
	}
}

func TestDenialLogRewriteKeepsThousand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	f, _ := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	defer f.Close()
	l, _ := NewDenialLog(f, nil)
	// Entries of about 200 bytes: 1000 of them fit the rewrite budget, so
	// a rewrite keeps exactly the newest 1000.
	for i := 0; ; i++ {
		before, _ := f.Stat()
		l.Record(Denial{Session: "s-1", Host: fmt.Sprintf("h%05d.test", i), Port: 443, Via: "connect", Reason: "not in network.allow_hosts", Decision: DecisionDenied})
		after, _ := f.Stat()
		if after.Size() < before.Size() {
			ds, err := ReadDenials(path)
			if err != nil || len(ds) != KeepDenials || ds[len(ds)-1].Host != fmt.Sprintf("h%05d.test", i) {
				t.Fatalf("after the rewrite: %d entries, last %+v, %v", len(ds), ds[len(ds)-1], err)
			}
			return
		}
		if i > 10000 {
			t.Fatal("never rewritten")
		}
	}
}

func TestReadDenials(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, fmt.Sprint(len(s)))
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	good := `{"v":1,"time":"2026-01-01T00:00:00Z","session":"s-1","host":"a.test","port":443,"via":"connect","reason":"r","decision":"denied"}` + "\n"
	if ds, err := ReadDenials(write(good + good + `{"v":1,"host":"torn`)); err != nil || len(ds) != 2 {
		t.Fatalf("torn last line: %v %v", ds, err)
	}
	_, err := ReadDenials(write(good + strings.Replace(good, `"v":1`, `"v":2`, 1)))
	if err == nil || !errors.Is(err, errdefs.ErrRefused) || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("v2 line: %v", err)
	}
	_, err = ReadDenials(write(good + "garbage\n" + good))
	if err == nil || !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("garbage line: %v", err)
	}
	if ds, err := ReadDenials(filepath.Join(dir, "absent")); err != nil || ds != nil {
		t.Fatalf("absent: %v %v", ds, err)
	}
}

// TestFDAsker runs the ask protocol over a socket pair, as between the
// proxy and the Runtime Supervisor: answers out of order reach the right
// asks, and a closed channel denies.
func TestFDAsker(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	proxySide, rsSide := os.NewFile(uintptr(fds[0]), "proxy"), os.NewFile(uintptr(fds[1]), "rs")
	defer proxySide.Close()
	ask := NewFDAsker(proxySide)
	// The RS side: collect two asks, answer them in reverse order.
	go func() {
		br := bufio.NewReader(rsSide)
		var got []AskMessage
		for len(got) < 2 {
			m, err := ReadAsk(br)
			if err != nil {
				t.Error(err)
				return
			}
			got = append(got, m)
		}
		for i := len(got) - 1; i >= 0; i-- {
			d := AllowOnce
			if got[i].Host == "b.test" {
				d = Deny
			}
			WriteDecision(rsSide, DecisionMessage{ID: got[i].ID, Decision: d})
		}
		// A third ask is left unanswered and the channel closed.
		if _, err := ReadAsk(br); err != nil {
			t.Error(err)
		}
		rsSide.Close()
	}()
	var wg sync.WaitGroup
	res := map[string]Decision{}
	var mu sync.Mutex
	for _, h := range []string{"a.test", "b.test"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := ask(context.Background(), AskRequest{Session: "s-1", Host: h, Port: 443, Via: "connect"})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			res[h] = d
			mu.Unlock()
		}()
	}
	wg.Wait()
	if res["a.test"] != AllowOnce || res["b.test"] != Deny {
		t.Fatalf("decisions %v", res)
	}
	d, err := ask(context.Background(), AskRequest{Session: "s-1", Host: "c.test", Port: 443, Via: "socks"})
	if err == nil || d != Deny || !strings.Contains(err.Error(), "closed the ask channel") {
		t.Fatalf("closed channel: %v %v", d, err)
	}
	if _, err := ask(context.Background(), AskRequest{Session: "s-1", Host: "d.test", Port: 443}); err == nil {
		t.Fatal("an ask on a broken channel succeeded")
	}
}

func TestAskProtocolRefusals(t *testing.T) {
	if err := WriteDecision(&strings.Builder{}, DecisionMessage{ID: 1, Decision: "maybe"}); err == nil {
		t.Fatal("unknown decision written")
	}
	for _, line := range []string{`{"id":1,"decision":"maybe"}`, `not json`} {
		if _, err := ReadDecision(bufio.NewReader(strings.NewReader(line + "\n"))); err == nil {
			t.Errorf("%s read", line)
		}
	}
	if _, err := ReadAsk(bufio.NewReader(strings.NewReader(`{"id":1,"session":"s-1","host":"","port":443}` + "\n"))); err == nil {
		t.Error("incomplete ask read")
	}
	long := strings.Repeat("x", maxLine+10)
	if _, err := ReadAsk(bufio.NewReader(strings.NewReader(long + "\n"))); err == nil || !errors.Is(err, errdefs.ErrCorrupt) {
		t.Errorf("overlong line: %v", err)
	}
}
