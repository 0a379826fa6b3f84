package sessions

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeClock advances only when told; its timers fire in Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
	fired   bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped && !t.fired
	t.stopped = true
	return was
}

// Advance moves the clock and runs the timers due, in this goroutine.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for _, t := range c.timers {
		if !t.stopped && !t.fired && !c.now.Before(t.at) {
			t.fired = true
			due = append(due, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// harness is a registry with the coordinator's side of the linger timer:
// its lock and the teardown requests it made.
type harness struct {
	mu        sync.Mutex
	r         *Registry[string]
	clock     *fakeClock
	teardowns int
}

func newHarness() *harness {
	h := &harness{clock: newFakeClock()}
	h.r = New[string](Config{Clock: h.clock, LingerExpired: func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.r.LingerEnded() {
			h.teardowns++
		}
	}})
	return h
}

func (h *harness) teardownsMade() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.teardowns
}

func TestAdmitAndLeave(t *testing.T) {
	r := New[string](Config{Clock: newFakeClock()})
	if !r.Idle() {
		t.Fatal("a new registry is not idle")
	}
	r.Admit("a", "session a", 0)
	r.Admit("b", "session b", 0)
	if r.Idle() {
		t.Fatal("idle with two sessions")
	}
	if s, ok := r.Get("a"); !ok || s != "session a" {
		t.Fatalf("Get(a) = %q, %v", s, ok)
	}
	ids := r.IDs()
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("IDs = %v", ids)
	}
	if r.Leave("a", true) {
		t.Fatal("teardown requested while a session remains")
	}
	if _, ok := r.Get("a"); ok {
		t.Fatal("a left session is still registered")
	}
	if !r.Leave("b", true) {
		t.Fatal("the last session left without a linger and no teardown was requested")
	}
	if r.Idle() {
		t.Fatal("a registry that had sessions is idle (the idle watch would fire)")
	}
	if len(r.All()) != 0 {
		t.Fatalf("sessions left over: %v", r.All())
	}
}

func TestLastLeaveOfAStoppingGenerationTearsDown(t *testing.T) {
	h := newHarness()
	h.r.Admit("a", "a", time.Minute)
	// Not running (starting failed, or stopping): a linger does not apply.
	if !h.r.Leave("a", false) {
		t.Fatal("no teardown for the last leave of a generation that is not running")
	}
	if _, ok := h.r.LingerLeft(); ok {
		t.Fatal("lingering after a teardown was requested")
	}
}

func TestLingerExpires(t *testing.T) {
	h := newHarness()
	h.r.Admit("a", "a", 30*time.Second)
	h.r.Admit("b", "b", 2*time.Minute)
	h.r.Admit("c", "c", time.Minute)
	if got := h.r.Linger(); got != 2*time.Minute {
		t.Fatalf("linger = %s, want the longest asked (2m)", got)
	}
	for _, id := range []string{"a", "b", "c"} {
		h.mu.Lock()
		td := h.r.Leave(id, true)
		h.mu.Unlock()
		if td {
			t.Fatalf("leave of %s requested a teardown while the Domain lingers", id)
		}
	}
	left, ok := h.r.LingerLeft()
	if !ok || left != 2*time.Minute {
		t.Fatalf("LingerLeft = %s, %v; want 2m, true", left, ok)
	}
	h.clock.Advance(time.Minute)
	if n := h.teardownsMade(); n != 0 {
		t.Fatalf("teardown after half the linger (%d)", n)
	}
	if left, _ := h.r.LingerLeft(); left != time.Minute {
		t.Fatalf("LingerLeft after 1m = %s", left)
	}
	h.clock.Advance(time.Minute)
	if n := h.teardownsMade(); n != 1 {
		t.Fatalf("teardowns after the linger = %d, want 1", n)
	}
	if _, ok := h.r.LingerLeft(); ok {
		t.Fatal("still lingering after the linger ended")
	}
}

func TestJoinEndsLinger(t *testing.T) {
	h := newHarness()
	h.r.Admit("a", "a", time.Minute)
	if h.r.Leave("a", true) {
		t.Fatal("teardown despite a linger")
	}
	h.clock.Advance(30 * time.Second)
	h.r.Admit("b", "b", 0)
	if _, ok := h.r.LingerLeft(); ok {
		t.Fatal("a join did not end the linger")
	}
	h.clock.Advance(time.Hour)
	if n := h.teardownsMade(); n != 0 {
		t.Fatalf("the cancelled linger tore down (%d)", n)
	}
	// The generation keeps its linger: the next last leave lingers again.
	if h.r.Leave("b", true) {
		t.Fatal("the second last leave did not linger")
	}
	h.clock.Advance(time.Minute)
	if n := h.teardownsMade(); n != 1 {
		t.Fatalf("teardowns = %d, want 1", n)
	}
}

// A linger timer that fires when a session joined meanwhile (it raced the
// join for the lock) does not tear down.
func TestStaleLingerTimer(t *testing.T) {
	h := newHarness()
	h.r.Admit("a", "a", time.Minute)
	h.r.Leave("a", true)
	h.r.Admit("b", "b", 0)
	h.r.lingerExpired() // as if the timer fired before its Stop
	if n := h.teardownsMade(); n != 0 {
		t.Fatalf("stale timer tore down (%d)", n)
	}
}

func TestStopEndsEverySession(t *testing.T) {
	h := newHarness()
	h.r.Admit("a", "a", time.Minute)
	h.r.Admit("b", "b", time.Minute)
	ending, first, teardown := h.r.Stop(true)
	slices.Sort(ending)
	if !slices.Equal(ending, []string{"a", "b"}) || !first || teardown {
		t.Fatalf("Stop = %v, %v, %v; want [a b], first, no immediate teardown", ending, first, teardown)
	}
	if !h.r.StopRequested() {
		t.Fatal("no stop requested after Stop")
	}
	if _, again, _ := h.r.Stop(true); again {
		t.Fatal("a second Stop is reported as the first")
	}
	if h.r.Leave("a", true) {
		t.Fatal("teardown with a session left")
	}
	// Stop overrides the linger: the last leave tears down.
	if !h.r.Leave("b", true) {
		t.Fatal("the last leave after stop lingered")
	}
	h.clock.Advance(time.Hour)
	if n := h.teardownsMade(); n != 0 {
		t.Fatalf("a linger timer ran after stop (%d)", n)
	}
}

func TestStopWithoutSessionsTearsDown(t *testing.T) {
	r := New[string](Config{Clock: newFakeClock()})
	if ending, first, teardown := r.Stop(true); len(ending) != 0 || !first || !teardown {
		t.Fatalf("Stop of a running generation without sessions = %v, %v, %v", ending, first, teardown)
	}
	r = New[string](Config{Clock: newFakeClock()})
	r.Admit("a", "a", 0)
	if _, _, teardown := r.Stop(false); !teardown {
		t.Fatal("Stop of a generation that is not running did not tear down at once")
	}
}

func TestDrained(t *testing.T) {
	r := New[string](Config{Clock: newFakeClock()})
	r.Admit("a", "a", 0)
	d := r.Drained()
	select {
	case <-d:
		t.Fatal("drained with a session writing")
	default:
	}
	r.Leave("a", true)
	r.Done()
	<-d // the test times out if Done does not drain
}
