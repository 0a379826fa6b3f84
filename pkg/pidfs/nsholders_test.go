package pidfs

import (
	"os"
	"slices"
	"testing"
)

// TestNamespaceHolders: this process is found in its own mount namespace;
// a namespace identity no process has is reported without holders.
func TestNamespaceHolders(t *testing.T) {
	dev, ino, err := NamespaceOfPath("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	pids, _, _, err := NamespaceHolders("mnt", dev, ino)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("own mount namespace %d:%d: holders %v lack pid %d", dev, ino, pids, os.Getpid())
	}
	pids, binds, _, err := NamespaceHolders("mnt", dev, 1)
	if err != nil || len(pids) != 0 || len(binds) != 0 {
		t.Fatalf("absent namespace: pids %v binds %v err %v", pids, binds, err)
	}
	if _, _, _, err := NamespaceHolders("mnt", 0, ino); err == nil {
		t.Fatal("incomplete identity accepted")
	}
}
