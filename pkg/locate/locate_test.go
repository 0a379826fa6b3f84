package locate

import (
	"os"
	"testing"
)

// TestSelf: Self names the very file this process runs.
func TestSelf(t *testing.T) {
	p, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	a, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat("/proc/self/exe")
	if err != nil || !os.SameFile(a, b) {
		t.Fatalf("Self() = %s, not the running executable (%v)", p, err)
	}
}
