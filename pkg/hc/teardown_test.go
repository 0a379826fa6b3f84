package hc

import (
	"log/slog"
	"reflect"
	"slices"
	"testing"

	"github.com/lazaret/lazaret/pkg/domain"
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
		{"withdraw publication", "end sessions", "begin release", "release publication"},
		{"release git routing", "stop runtime supervisor", "stop connectivity helper", "close escalation", "close supervisor channel", "destroy trust anchor", "clean network"},
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
