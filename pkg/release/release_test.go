package release

import "testing"

func TestParseLine(t *testing.T) {
	v, err := ParseLine("lazaret-hc v1.2-3-gabc-dirty\n", "lazaret-hc")
	if err != nil || v != "v1.2-3-gabc-dirty" {
		t.Fatalf("%q %v", v, err)
	}
	for _, bad := range []string{"", "lazaret-rs v1", "lazaret-hc", "Usage: lazaret-hc [flags]\nmore"} {
		if _, err := ParseLine(bad, "lazaret-hc"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
