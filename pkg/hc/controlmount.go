package hc

import (
	"os"
	"path/filepath"

	"github.com/lazaret/lazaret/pkg/ocispec"
	"github.com/lazaret/lazaret/pkg/trust"
)

// CredentialsDir is the fixed credential path inside the sandbox.
const CredentialsDir = ocispec.CredentialsDir

// credentialDir holds the host source of the sandbox key's mount.
func (c *coordinator) credentialDir() string { return filepath.Join(c.paths.RuntimeDir, "credentials") }

// sandboxCredentialFiles are the files at the fixed credential path.
var sandboxCredentialFiles = []string{sandboxKeyFile, "sandbox.cred", "manifest", "coordinator.cred"}

// sandboxKeyFile is the only credential file with a mount of its own.
const sandboxKeyFile = trust.SandboxKeyFile

// writeSandboxCredentials writes the sandbox's credential files at the
// fixed credential path of the control mount source. The key is a
// read-only bind of its own, from the private credential directory, so it
// stays readable inside after HC unlinks its source (spec §3.2); RS makes
// that bind in its mount namespace (ocispec.HostSideBinds), as runsc
// would serve a spec mount through a gofer mount of its own. The public
// files (the sandbox's credential, the Trust Manifest and the
// coordinator's verification credential) are files of the read-only
// control mount itself.
func (c *coordinator) writeSandboxCredentials() error {
	files, err := c.anchor.SandboxFiles()
	if err != nil {
		return err
	}
	points := filepath.Join(c.paths.ControlMountSource(), "credentials")
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{c.credentialDir(), 0o700}, {points, controlDirMode}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	// Readable by every guest user: the sandbox is one principal (a
	// request is bound to its session by the Session Request Capability),
	// and a non-root session user must sign its requests too. Host side
	// the sources stay in the private credential directory.
	for _, name := range sandboxCredentialFiles {
		data := files[name]
		if name == sandboxKeyFile {
			if err := writeFileMode(filepath.Join(c.credentialDir(), name), data, 0o644); err != nil {
				return err
			}
			data = nil // the key's mount point
		}
		if err := writeFileMode(filepath.Join(points, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// controlDirMode is the mode of the control mount's directories.
const controlDirMode = 0o755

// writeFileMode writes data to path with exactly mode (not masked).
func writeFileMode(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// credentialMounts are the credential path's own bind mounts: the key's.
func (c *coordinator) credentialMounts() []ocispec.ControlFile {
	return []ocispec.ControlFile{{Source: filepath.Join(c.credentialDir(), sandboxKeyFile), Target: CredentialsDir + "/" + sandboxKeyFile}}
}
