package hc

import (
	"io"
	"os"
	"path/filepath"

	"github.com/lazaret/lazaret/pkg/ocispec"
)

// CredentialsDir is the fixed credential path inside the sandbox.
const CredentialsDir = ocispec.CredentialsDir

// credentialDir holds the host sources of the sandbox credential mounts.
func (c *coordinator) credentialDir() string { return filepath.Join(c.paths.RuntimeDir, "credentials") }

// sandboxCredentialFiles are the files of the credential mount.
var sandboxCredentialFiles = []string{"sandbox.key", "sandbox.cred", "manifest", "coordinator.cred"}

// writeSandboxCredentials writes the sandbox's credential files (the only
// private key that enters the sandbox is its request-signing key) and the
// empty mount points for them in the control mount source. Each file is its
// own read-only bind mount, so the key stays readable inside after HC
// unlinks its source.
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
		if err := writeFileMode(filepath.Join(c.credentialDir(), name), files[name], 0o644); err != nil {
			return err
		}
		if err := writeFileMode(filepath.Join(points, name), nil, 0o644); err != nil {
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

func (c *coordinator) credentialMounts() []ocispec.ControlFile {
	var out []ocispec.ControlFile
	for _, name := range sandboxCredentialFiles {
		out = append(out, ocispec.ControlFile{Source: filepath.Join(c.credentialDir(), name), Target: CredentialsDir + "/" + name})
	}
	return out
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
