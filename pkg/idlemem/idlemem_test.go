package idlemem

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSettleUnmapsExecutable runs this test binary as an idle child that
// calls Settle between two reads of its stdin, and checks in the child's
// smaps that its resident code and read-only data shrank, and that the
// child keeps running code from them afterwards.
func TestSettleUnmapsExecutable(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		return
	}
	before, after := settleChild(t, "Settle")
	// What the child runs after Settle faults back in (with the kernel's
	// fault-around, up to 16 pages a fault): writing a line and reading
	// one is well under half of a test binary's start-up.
	if after*2 > before {
		t.Fatalf("%d kB resident after Settle, %d kB before: not released", after, before)
	}
}

// TestSettleHeapKeepsExecutable: SettleHeap (the guest init's settle)
// leaves the executable's pages mapped.
func TestSettleHeapKeepsExecutable(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		return
	}
	before, after := settleChild(t, "SettleHeap")
	if after*10 < before*9 {
		t.Fatalf("%d kB resident after SettleHeap, %d kB before: it unmapped the executable", after, before)
	}
}

// settleChild runs the idle child with settle (Settle or SettleHeap) and
// returns the Rss (kB) of its read-only executable mappings before and
// after the call.
func settleChild(t *testing.T, settle string) (before, after int) {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), childEnv+"="+settle)
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	defer in.Close()
	out := bufio.NewReader(outPipe)
	expect := func(want string) string {
		t.Helper()
		l, err := out.ReadString('\n')
		if err != nil || !strings.HasPrefix(l, want) {
			t.Fatalf("child said %q (%v), want %q", l, err, want)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, want))
	}
	expect("started")
	before = exeReadOnlyRSS(t, c.Process.Pid)
	io.WriteString(in, "settle\n")
	expect("settled")
	after = exeReadOnlyRSS(t, c.Process.Pid)
	t.Logf("child's read-only executable mappings: %d kB resident before %s, %d kB after", before, settle, after)
	if before < 1024 {
		t.Fatalf("only %d kB resident before %s", before, settle)
	}
	io.WriteString(in, "work\n")
	if got := expect("worked"); got != "424242" {
		t.Fatalf("child computed %q after %s", got, settle)
	}
	return before, after
}

const childEnv = "LAZARET_IDLEMEM_TEST_CHILD"

// TestMain runs the idle child of settleChild: LAZARET_IDLEMEM_TEST_CHILD
// names the settle it calls.
func TestMain(m *testing.M) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	in := bufio.NewReader(os.Stdin)
	fmt.Println("started")
	in.ReadString('\n')
	if mode == "SettleHeap" {
		if r := SettleHeap(nil); r.TextMappings != 0 {
			fmt.Printf("unmapped %d mappings: %+v\n", r.TextMappings, r)
		}
	} else if r := Settle(nil); r.TextMappings == 0 {
		fmt.Printf("unmapped nothing: %+v\n", r)
	}
	os.Stdout.Write([]byte("settled\n")) // little code runs before the parent measures
	in.ReadString('\n')
	fmt.Printf("worked %s\n", strings.Repeat(strconv.Itoa(42), 3))
	in.ReadString('\n')
	os.Exit(0)
}

// exeReadOnlyRSS sums the Rss (kB) of pid's read-only private mappings of
// its executable.
func exeReadOnlyRSS(t *testing.T, pid int) int {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	total, in := 0, false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4 {
			in = len(f) >= 6 && strings.Join(f[5:], " ") == exe && f[1][1] != 'w' && f[1][3] == 'p'
			continue
		}
		if in && len(f) >= 2 && f[0] == "Rss:" {
			n, _ := strconv.Atoi(f[1])
			total += n
		}
	}
	return total
}

// TestSettleSoonCoalesces: calls in quick succession settle once, Delay
// after the last one.
func TestSettleSoonCoalesces(t *testing.T) {
	watchOnce.Do(func() {}) // no idle watch: it would settle on its own
	calls := make(chan time.Time, 8)
	settle = func(*slog.Logger) Result { calls <- time.Now(); return Result{} }
	defer func() { settle = Settle }()
	// The wait is shortened so the test takes a fraction of Delay; the
	// coalescing it checks does not depend on its length.
	const delay = Delay / 4
	soonDelay = delay
	defer func() { soonDelay = Delay }()
	var last time.Time
	for i := 0; i < 3; i++ {
		last = time.Now()
		SettleSoon(nil)
		time.Sleep(delay / 5)
	}
	select {
	case at := <-calls:
		if at.Sub(last) < delay {
			t.Fatalf("settled %v after the last call, before delay %v", at.Sub(last), delay)
		}
	case <-time.After(10 * delay):
		t.Fatal("SettleSoon never settled")
	}
	select {
	case <-calls:
		t.Fatal("settled twice")
	case <-time.After(delay + delay/2):
	}
}

// TestDeferCollectionUntilSettle: deferred, the collector is off under
// StartUpLimit (or a lower limit of the process's own); the first Settle
// restores both settings as they were, and a second deferral before it
// changes nothing.
func TestDeferCollectionUntilSettle(t *testing.T) {
	prevPercent := debug.SetGCPercent(150)
	defer debug.SetGCPercent(prevPercent)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(prevLimit)
	for _, limit := range []int64{math.MaxInt64, 32 << 20} {
		debug.SetMemoryLimit(limit)
		DeferCollection()
		DeferCollection()
		if p := debug.SetGCPercent(-1); p != -1 {
			t.Errorf("limit %d: GC percent %d while deferred, want -1 (off)", limit, p)
		}
		if l := debug.SetMemoryLimit(-1); l != min(limit, StartUpLimit) {
			t.Errorf("memory limit %d while deferred, want %d", l, min(limit, StartUpLimit))
		}
		Settle(nil)
		if p := debug.SetGCPercent(150); p != 150 {
			t.Errorf("limit %d: GC percent %d after Settle, want 150", limit, p)
		}
		if l := debug.SetMemoryLimit(-1); l != limit {
			t.Errorf("memory limit %d after Settle, want %d", l, limit)
		}
	}
}
