package statemaint

import (
	"errors"
	"strings"
	"testing"

	"github.com/lazaret/lazaret/pkg/errdefs"
	"github.com/lazaret/lazaret/pkg/hostcheck"
)

// TestIDMapLeavesOverflowUnmapped: namespace id 65534 stays unmapped, so an
// entry showing it is someone else's; every subordinate id is mapped once.
func TestIDMapLeavesOverflowUnmapped(t *testing.T) {
	got := strings.Join(idMap(1001, hostcheck.SubIDRange{Start: 100000, Count: 65536}), " ")
	if got != "0 1001 1 1 100000 65533 65535 165533 3" {
		t.Fatalf("map %q", got)
	}
	c := nsChecker(1001, 1001, 100000, 200000, 65536)
	for id, ok := range map[uint32]bool{0: true, 1: true, 65533: true, 65534: false, 65535: true, 65537: true, 65538: false} {
		if c.OwnerOK(id, 0) != ok {
			t.Errorf("uid %d: ok %v", id, !ok)
		}
	}
	for id, want := range map[uint32]string{0: "uid 1001 (you)", 1: "uid 100000", 65533: "uid 165532", 65535: "uid 165533", 65537: "uid 165535", 65534: "uid an id outside your user and subordinate ids"} {
		if got := c.Describe(id, false); got != want {
			t.Errorf("describe %d: %q, want %q", id, got, want)
		}
	}
	if got := c.Describe(2, true); got != "gid 200001" {
		t.Errorf("gid: %q", got)
	}
}

func TestDecodeRefusesNewer(t *testing.T) {
	if _, err := decode([]byte(`{"version": 2, "scope": "anchors"}`)); !errors.Is(err, errdefs.ErrRefused) {
		t.Fatalf("newer report: %v", err)
	}
	if _, err := decode([]byte(`garbage`)); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("garbage: %v", err)
	}
	r, err := decode([]byte(`{"version": 1, "scope": "ignored", "ignored": {"present": true, "findings": [{"kind": "device", "path": "x", "detail": "d"}]}, "general": []}`))
	if err != nil || r.Findings() != 1 {
		t.Fatalf("%+v %v", r, err)
	}
}
