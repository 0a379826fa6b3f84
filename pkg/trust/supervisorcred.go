package trust

import (
	"crypto/ed25519"
	"encoding/json"

	"github.com/lazaret/lazaret/pkg/errdefs"
)

// SupervisorCredentialFile is what the Runtime Supervisor receives from
// its coordinator in a sealed memfd: its own protocol signing key, the
// coordinator's verification key, the generation it serves and the
// prepared lower it holds (which StartSandbox names again; RS refuses a
// difference). The coordinator writes it (package hc/supervisor), RS reads
// it (package rs); both use this one type.
type SupervisorCredentialFile struct {
	KeySeed              []byte `json:"key_seed"`
	CoordinatorPublicKey []byte `json:"coordinator_public_key"`
	DomainID             string `json:"domain_id"`
	Generation           uint64 `json:"generation"`
	StorageRoot          string `json:"storage_root"`
	ImageRef             string `json:"image_ref"`
}

// Marshal encodes f.
func (f SupervisorCredentialFile) Marshal() []byte {
	b, err := json.Marshal(f)
	if err != nil {
		panic(err) // byte slices, strings and an integer always encode
	}
	return b
}

// ParseSupervisorCredentialFile decodes and checks a credential file: a
// malformed one, or keys of the wrong size, is ErrCorrupt.
func ParseSupervisorCredentialFile(raw []byte) (SupervisorCredentialFile, error) {
	var f SupervisorCredentialFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return f, errdefs.New(errdefs.ErrCorrupt, "malformed runtime supervisor credential: %v", err)
	}
	if len(f.KeySeed) != ed25519.SeedSize || len(f.CoordinatorPublicKey) != ed25519.PublicKeySize {
		return f, errdefs.New(errdefs.ErrCorrupt, "malformed runtime supervisor credential: key seed of %d bytes, coordinator key of %d bytes (want %d and %d)",
			len(f.KeySeed), len(f.CoordinatorPublicKey), ed25519.SeedSize, ed25519.PublicKeySize)
	}
	return f, nil
}
