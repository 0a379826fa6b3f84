package prepare

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Media types of a single-platform image manifest, the only kind the
// layout fast path resolves (a list or index takes the image library's
// platform choice).
const (
	ociManifestType    = "application/vnd.oci.image.manifest.v1+json"
	dockerManifestType = "application/vnd.docker.distribution.manifest.v2+json"
	annotationRefName  = "org.opencontainers.image.ref.name"
	maxLayoutJSON      = 4 << 20
)

// layoutManifestDigest resolves an "oci:PATH[:TAG]" reference to its
// manifest digest without the image library: the descriptor index.json
// names for TAG (the only manifest when there is no TAG), which must be a
// single-platform image manifest whose blob's SHA-256 is that digest. ok is
// false for anything else (another transport, a manifest list, a missing or
// ambiguous tag, an unreadable or mismatched blob): the caller then
// resolves with the image library, which reports the error if there is
// one. The result is what resolve would compute, so it maps to the same
// prepared-artifact ID; used only to find an already published artifact.
func layoutManifestDigest(imageRef string) (digest string, ok bool) {
	rest, isOCI := strings.CutPrefix(imageRef, "oci:")
	if !isOCI {
		return "", false
	}
	// As the oci transport splits it: the path up to the first colon.
	dir, tag, _ := strings.Cut(rest, ":")
	if dir == "" || !filepath.IsAbs(dir) {
		return "", false
	}
	var index struct {
		Manifests []struct {
			MediaType   string            `json:"mediaType"`
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	b, err := readLimited(filepath.Join(dir, "index.json"))
	if err != nil || json.Unmarshal(b, &index) != nil {
		return "", false
	}
	found := -1
	for i, m := range index.Manifests {
		if tag == "" || m.Annotations[annotationRefName] == tag {
			if found >= 0 {
				return "", false // ambiguous: the image library decides (and refuses)
			}
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	d := index.Manifests[found]
	if d.MediaType != ociManifestType && d.MediaType != dockerManifestType {
		return "", false
	}
	hexDigest, isSHA := strings.CutPrefix(d.Digest, "sha256:")
	if !isSHA || len(hexDigest) != 64 || strings.Trim(hexDigest, "0123456789abcdef") != "" {
		return "", false
	}
	mb, err := readLimited(filepath.Join(dir, "blobs", "sha256", hexDigest))
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(mb)
	if hex.EncodeToString(sum[:]) != hexDigest {
		return "", false
	}
	var m struct {
		MediaType string          `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
		Config    json.RawMessage `json:"config"`
	}
	if json.Unmarshal(mb, &m) != nil || m.Manifests != nil || m.Config == nil || (m.MediaType != "" && m.MediaType != d.MediaType) {
		return "", false
	}
	return d.Digest, true
}

// readLimited reads a small layout file (index.json or a manifest).
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLayoutJSON+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxLayoutJSON {
		return nil, io.ErrShortBuffer
	}
	return b, nil
}
