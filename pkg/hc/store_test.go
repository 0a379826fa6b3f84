package hc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lazaret/lazaret/pkg/pidfs"
	"github.com/lazaret/lazaret/pkg/store"
)

// openTestStore gives c (paths.ID set) a Domain Store in dir, closed when
// the test ends, and this test process as its coordinator identity.
func openTestStore(t *testing.T, c *coordinator, dir string) {
	t.Helper()
	lock, err := os.Create(filepath.Join(dir, "lifecycle.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if c.store, err = store.Open(dir, lock, store.DomainIdentity{ID: c.paths.ID, Profile: "default", CanonicalWorkspace: "/w"}, store.Options{Logger: c.log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.store.Close() })
	self, err := pidfs.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	c.self = self.Identity()
	self.Close()
}
