// Package trusttest creates the Trust Anchor of a test generation, for the
// tests of the packages that hold or use one (the Host Coordinator, its
// escalation role): the same identity, anchor, sandbox files and sandbox
// key every such fixture needs.
package trusttest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/lazaret/lazaret/pkg/domain"
	"github.com/lazaret/lazaret/pkg/trust"
)

// Workspace and Profile name the test generation's Domain.
const (
	Workspace = "/p"
	Profile   = "default"
)

// Generation is a test generation's Trust Anchor with its identity, the
// files at its sandbox's credential path and the sandbox's private
// request-signing key.
type Generation struct {
	Anchor     *trust.Anchor
	ID         trust.GenerationIdentity
	Files      map[string][]byte
	SandboxKey ed25519.PrivateKey
}

// New creates generation gen of the Domain of Profile and Workspace, with
// a fresh coordinator and sandbox ID.
func New(gen uint64) (Generation, error) {
	coord, err := trust.NewID(rand.Reader)
	if err != nil {
		return Generation{}, err
	}
	sandboxID, err := trust.NewID(rand.Reader)
	if err != nil {
		return Generation{}, err
	}
	id := trust.GenerationIdentity{DomainID: string(domain.DeriveID(Profile, Workspace)), Generation: gen, CoordinatorID: coord, Profile: Profile,
		ConfigFingerprint: "sha256:" + strings.Repeat("0", 64)}
	a, err := trust.NewAnchor(id, sandboxID, trust.Options{})
	if err != nil {
		return Generation{}, err
	}
	files, err := a.SandboxFiles()
	if err != nil {
		return Generation{}, err
	}
	blk, _ := pem.Decode(files[trust.SandboxKeyFile])
	if blk == nil {
		return Generation{}, fmt.Errorf("trusttest: the sandbox key is not PEM")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return Generation{}, err
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return Generation{}, fmt.Errorf("trusttest: the sandbox key is a %T, not Ed25519", k)
	}
	return Generation{Anchor: a, ID: id, Files: files, SandboxKey: key}, nil
}
