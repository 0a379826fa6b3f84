package hc

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/trust/trusttest"
)

// TestSandboxCredentialsLayout: the four files are at the fixed credential
// path of the control mount source; only the key comes from the private
// credential directory through a bind of its own (so it outlives the unlink
// of its source), the public files are the control mount's own and no
// private key is among them.
func TestSandboxCredentialsLayout(t *testing.T) {
	g, err := trusttest.New(3)
	if err != nil {
		t.Fatal(err)
	}
	a, id, want := g.Anchor, g.ID, g.Files
	root := t.TempDir()
	c := &coordinator{anchor: a}
	c.paths = domain.Paths{ID: domain.ID(id.DomainID), RuntimeDir: filepath.Join(root, "r")}
	if err = c.writeSandboxCredentials(); err != nil {
		t.Fatal(err)
	}
	points := filepath.Join(c.paths.ControlMountSource(), "credentials")
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(points, name))
		if err != nil {
			t.Fatalf("%s at the credential path: %v", name, err)
		}
		fi, _ := os.Stat(filepath.Join(points, name))
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644 (every guest user signs its requests)", name, fi.Mode().Perm())
		}
		switch {
		case name == sandboxKeyFile && len(got) != 0:
			t.Errorf("the key's mount point in the control mount source holds %d bytes, want none (the key is its own bind)", len(got))
		case name != sandboxKeyFile && !bytes.Equal(got, data):
			t.Errorf("%s in the control mount differs from the anchor's", name)
		case name != sandboxKeyFile && bytes.Contains(got, []byte("PRIVATE KEY")):
			t.Errorf("%s holds a private key", name)
		}
	}
	srcs, _ := os.ReadDir(c.credentialDir())
	if len(srcs) != 1 || srcs[0].Name() != sandboxKeyFile {
		t.Fatalf("credential directory holds %v, want only %s", srcs, sandboxKeyFile)
	}
	if fi, _ := os.Stat(c.credentialDir()); fi.Mode().Perm() != 0o700 {
		t.Errorf("credential directory mode %v, want 0700", fi.Mode().Perm())
	}
	key, _ := os.ReadFile(filepath.Join(c.credentialDir(), sandboxKeyFile))
	if !bytes.Equal(key, want[sandboxKeyFile]) {
		t.Error("the key's source differs from the anchor's key")
	}
	m := c.credentialMounts()
	if len(m) != 1 || m[0].Source != filepath.Join(c.credentialDir(), sandboxKeyFile) || m[0].Target != CredentialsDir+"/"+sandboxKeyFile {
		t.Fatalf("credential mounts %+v, want the key's bind only", m)
	}
}
