package hc

import (
	"reflect"
	"testing"
)

// TestStartUpProgressOfAJoin: a session that waits for the start sees
// every progress line; one that joins the running generation sees only
// the warnings.
func TestStartUpProgressOfAJoin(t *testing.T) {
	lines := []string{"prepare: reusing pl-1 for oci:x", "warning: network.allow_hosts a.test did not resolve", "anchors: 3 mounted"}
	if got := startUpProgress(lines, false); !reflect.DeepEqual(got, lines) {
		t.Errorf("starting session: %q, want %q", got, lines)
	}
	if got, want := startUpProgress(lines, true), []string{lines[1]}; !reflect.DeepEqual(got, want) {
		t.Errorf("joining session: %q, want %q", got, want)
	}
	if got := startUpProgress(nil, true); len(got) != 0 {
		t.Errorf("joining session without progress: %q", got)
	}
}
