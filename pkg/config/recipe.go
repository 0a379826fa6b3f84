package config

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
)

// RecipeFormat is the version of the recipe encoding that RecipeDigest
// digests and of what a recipe build commits (the State Anchors' changes as
// one layer over the base). A change of either changes every recipe's
// digest, so every recipe image is rebuilt.
const RecipeFormat = 1

// MaxRecipeSteps and MaxRecipeStep bound a recipe.
const (
	MaxRecipeSteps = 64
	MaxRecipeStep  = 16 << 10
)

// Recipe builds a profile's image instead of naming a ready one: the base
// image and the ordered shell commands run in it, as guest root, in a
// Lazaret sandbox with the profile's network (docs/CONFIG.md "recipe").
// What the steps change under the default State Anchor paths becomes one
// OCI layer over the base.
type Recipe struct {
	// Base is a built-in image name or an oci: layout reference.
	Base string `json:"base"`
	// Run are the steps, each run as `sh -c STEP`.
	Run []string `json:"run"`
	// Digest is RecipeDigest(Base, Run): the recipe's identity in the
	// Configuration Fingerprint and in the image store.
	Digest string `json:"digest"`
}

// recipeContext domain-separates the recipe digest.
const recipeContext = "lazaret/v1/recipe"

// RecipeDigest is "sha256:" and the hex SHA-256 of the recipe context,
// RecipeFormat, the base reference and each step, every string with its
// 8-byte big-endian length, so that no two recipes share a digest.
func RecipeDigest(base string, run []string) string {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(recipeContext)
	put(fmt.Sprint(RecipeFormat))
	put(base)
	for _, s := range run {
		put(s)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// StoreName is the recipe image's directory in the image store
// ($XDG_DATA_HOME/lazaret/images/): "recipe-" and 20 hex digits of its
// digest.
func (r *Recipe) StoreName() string {
	return "recipe-" + strings.TrimPrefix(r.Digest, "sha256:")[:20]
}

// Layout is the recipe image's OCI layout under dataHome.
func (r *Recipe) Layout(dataHome string) string {
	return filepath.Join(dataHome, "lazaret", "images", r.StoreName())
}

// Summary is a one-line description for listings: base, step count and
// short digest.
func (r *Recipe) Summary() string {
	steps := "steps"
	if len(r.Run) == 1 {
		steps = "step"
	}
	return fmt.Sprintf("recipe: %s + %d %s (%s)", r.Base, len(r.Run), steps, short(r.Digest))
}

// checkRecipeBase checks a recipe's base; "" when good.
func checkRecipeBase(s string) string {
	if strings.HasPrefix(s, "docker://") {
		return fmt.Sprintf("%q: a recipe's base is a built-in image (%s) or an oci:/absolute/layout[:tag]; copy a registry image into a layout first (skopeo copy %s oci:/srv/images/base:latest) and use base = \"oci:/srv/images/base:latest\"", s, strings.Join(builtinImages, ", "), s)
	}
	if msg := checkImage(s); msg != "" {
		return strings.Replace(msg, "unknown image", "unknown recipe base", 1)
	}
	return ""
}

// checkRecipeStep checks one step; "" when good.
func checkRecipeStep(s string) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "a step is empty: give a shell command such as \"apt-get update\", or remove it"
	case strings.ContainsRune(s, 0):
		return "a step contains a NUL byte, which a command line cannot carry"
	case len(s) > MaxRecipeStep:
		return fmt.Sprintf("a step is longer than %d bytes: put long scripts into several steps", MaxRecipeStep)
	}
	return ""
}
