package config

import (
	"reflect"
	"testing"
)

// TestDefaultPersistentPaths (spec §3.5, DX-2): every profile gets the
// default State Anchors; a volume on a default path replaces it, configured
// paths inside a default are absorbed, a configured parent absorbs a
// default.
func TestDefaultPersistentPaths(t *testing.T) {
	c := mustParse(t, `[profiles.a]
persistent_paths = ["/usr/local", "/var", "/srv/data"]
[[profiles.a.volumes]]
source = "/srv"
target = "/opt"
`)
	p, _ := c.Profile("a")
	if want := []string{"/etc", "/home", "/root", "/srv/data", "/usr", "/var"}; !reflect.DeepEqual(p.PersistentPaths, want) {
		t.Errorf("persistent %v, want %v", p.PersistentPaths, want)
	}
	tiny, _ := c.Profile("tiny")
	if !reflect.DeepEqual(tiny.PersistentPaths, DefaultPersistentPaths) {
		t.Errorf("tiny %v", tiny.PersistentPaths)
	}
}

func TestPersistentPathReservedCharacters(t *testing.T) {
	expectErrors(t, "[profiles.a]\npersistent_paths = [\"/a,b\", \"/c:d\"]\n",
		at{2, `"/a,b": a persistent path cannot contain`},
		at{2, `"/c:d": a persistent path cannot contain`},
	)
}

func TestDefaultPersistentPathsOff(t *testing.T) {
	c := mustParse(t, "[profiles.a]\ndefault_persistent_paths = false\npersistent_paths = [\"/root/.npm\"]\n")
	p, _ := c.Profile("a")
	if !reflect.DeepEqual(p.PersistentPaths, []string{"/root/.npm"}) {
		t.Errorf("persistent %v", p.PersistentPaths)
	}
}
