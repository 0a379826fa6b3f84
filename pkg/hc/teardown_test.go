package hc

import (
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hc/sessions"
)

// TestTeardownOrder pins the durable store transitions of the teardown
// list: every release intent (publication, sandbox, prepared lower,
// network, Git routing) while the runtime still runs, then — after RS is
// stopped and reaped — the cleans in the order network, prepared lower,
// Git routing and sandbox, the store closed after the last of them and
// the runtime files removed only after that. A reverse-of-start walk
// would reorder these records, which existing stores and the recovery of
// a crash mid-teardown rely on.
func TestTeardownOrder(t *testing.T) {
	c := &coordinator{}
	steps := c.teardownSteps(nil, nil)
	var records []string
	for _, s := range steps {
		if len(s.records) > 0 && !s.store {
			t.Errorf("step %q records %q but does not need the store", s.name, s.records)
		}
		records = append(records, s.records...)
	}
	want := []string{
		"publication ReleaseIntent", "publication Clean",
		"sandbox ReleaseIntent",
		"state_anchor ReleaseIntent",
		"network ReleaseIntent", "helper ReleaseIntent",
		"git_routing ReleaseIntent",
		"network Clean", "helper Clean",
		"state_anchor Clean", "prepared_lower ReleaseIntent", "prepared_lower Clean",
		"git_routing Clean", "sandbox Clean",
	}
	if !reflect.DeepEqual(records, want) {
		t.Errorf("durable transitions\n got %q\nwant %q", records, want)
	}
	at := func(name string) int {
		i := slices.IndexFunc(steps, func(s teardownStep) bool { return s.name == name })
		if i < 0 {
			t.Fatalf("no teardown step %q", name)
		}
		return i
	}
	for _, order := range [][]string{
		{"withdraw publication", "end sessions", "begin release", "release intents"},
		{"release intents", "stop runtime supervisor", "stop connectivity helper", "close escalation", "close supervisor channel", "destroy trust anchor", "clean network"},
		{"clean git routing and sandbox", "close store", "remove runtime files", "end sticky paths", "finish generation"},
	} {
		for i := 1; i < len(order); i++ {
			if at(order[i-1]) >= at(order[i]) {
				t.Errorf("%q does not come before %q", order[i-1], order[i])
			}
		}
	}
	if last := steps[len(steps)-1].name; last != "finish generation" {
		t.Errorf("last step %q", last)
	}
}

// TestWalkTeardown: the walk runs every step once, in list order, and
// skips the steps that use the Domain Store when there is none.
func TestWalkTeardown(t *testing.T) {
	var ran []string
	steps := []teardownStep{
		{name: "a", run: func() { ran = append(ran, "a") }},
		{name: "b", store: true, run: func() { ran = append(ran, "b") }},
		{name: "c", run: func() { ran = append(ran, "c") }},
		{name: "d", store: true, run: func() { ran = append(ran, "d") }},
	}
	c := &coordinator{log: slog.New(slog.DiscardHandler)}
	c.walkTeardown(steps)
	if want := []string{"a", "c"}; !reflect.DeepEqual(ran, want) {
		t.Errorf("without a store ran %q, want %q", ran, want)
	}
	ran = nil
	c.paths.ID = domain.DeriveID("default", "/w")
	openTestStore(t, c, t.TempDir())
	c.walkTeardown(steps)
	if want := []string{"a", "b", "c", "d"}; !reflect.DeepEqual(ran, want) {
		t.Errorf("with a store ran %q, want %q", ran, want)
	}
}

// TestAwaitStartFailureHeard: a generation that failed before its
// publication, with no session yet, keeps its control socket until a
// session request was refused with the failure, bounded by
// startFailureGrace; any other teardown does not wait.
func TestAwaitStartFailureHeard(t *testing.T) {
	defer func(g time.Duration) { startFailureGrace = g }(startFailureGrace)
	startFailureGrace = time.Hour
	newCoordinator := func() *coordinator {
		return &coordinator{log: slog.New(slog.DiscardHandler), st: stateStarting, ready: make(chan struct{}), teardownC: make(chan struct{}),
			failureHeard: make(chan struct{}), sessions: sessions.New[*session](sessions.Config{Log: slog.New(slog.DiscardHandler)})}
	}
	returned := func(c *coordinator) <-chan struct{} {
		done := make(chan struct{})
		go func() { c.awaitStartFailureHeard(); close(done) }()
		return done
	}

	c := newCoordinator()
	c.setState(stateFailed, errdefs.New(errdefs.ErrRefused, "the workspace is a linked Git worktree"))
	done := returned(c)
	select {
	case <-done:
		t.Fatal("returned before the starting CLI heard the failure")
	case <-time.After(50 * time.Millisecond):
	}
	c.heardOnce.Do(func() { close(c.failureHeard) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after the failure was heard")
	}

	// Bounded: nobody dials.
	startFailureGrace = 20 * time.Millisecond
	c = newCoordinator()
	c.setState(stateFailed, errdefs.New(errdefs.ErrRefused, "refused"))
	select {
	case <-returned(c):
	case <-time.After(5 * time.Second):
		t.Fatal("not bounded by startFailureGrace")
	}
	startFailureGrace = time.Hour

	// No wait: a published generation that failed later, a normal stop,
	// and a start failure a session already waits for.
	c = newCoordinator()
	c.setState(stateRunning, nil)
	c.setState(stateFailed, errdefs.New(errdefs.ErrUnavailable, "the runtime supervisor exited"))
	c2 := newCoordinator()
	c2.mu.Lock()
	c2.requestTeardownLocked()
	c2.mu.Unlock()
	c3 := newCoordinator()
	c3.sessions.Admit("s1", &session{}, 0)
	c3.setState(stateFailed, errdefs.New(errdefs.ErrRefused, "refused"))
	for i, c := range []*coordinator{c, c2, c3} {
		select {
		case <-returned(c):
		case <-time.After(5 * time.Second):
			t.Fatalf("case %d waited", i)
		}
	}
}
