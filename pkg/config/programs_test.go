package config

import (
	"strings"
	"testing"
)

func TestPrograms(t *testing.T) {
	c, err := Parse("c.toml", []byte("[programs]\nrunsc = \"/opt/gvisor/runsc\"\nlazaret-hc = \"/opt/l/libexec/lazaret/lazaret-hc\"\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Programs["runsc"] != "/opt/gvisor/runsc" || c.Programs["lazaret-hc"] != "/opt/l/libexec/lazaret/lazaret-hc" || len(c.Programs) != 2 {
		t.Fatalf("%v", c.Programs)
	}
	for doc, want := range map[string]string{
		"[programs]\nrunsc = \"runsc\"\n":            "not an absolute, clean path",
		"[programs]\nrunsc = \"/opt/../runsc\"\n":    "not an absolute, clean path",
		"[programs]\ndocker = \"/usr/bin/docker\"\n": "unknown key \"docker\"",
		"[programs]\nrunsc = 1\n":                    "must be a string",
		"programs = 1\n":                             "must be a table",
	} {
		_, err := Parse("c.toml", []byte(doc), Options{})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "c.toml:") {
			t.Errorf("%q: %v, want %q with its line", doc, err, want)
		}
	}
}
