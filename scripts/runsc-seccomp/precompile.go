//go:build ignore

// precompile writes the seccomp-bpf programs of the pinned runsc into its
// source, as gVisor's release build does: without them, the Go-module
// build of runsc compiles its sentry's and gofer's filters on every start
// (sentry about 20 ms of CPU, gofer about 9, on the critical path of every
// `lazaret run`).
//
// scripts/setup.sh copies this file into a writable copy of the gVisor
// module (without its build constraint) and runs it there, once for the
// sentry (boot) and once for the gofer:
//
//	go run ./lazaret-precompile boot runsc/boot/filter/filter_precompiled.go
//	go run ./lazaret-precompile gofer runsc/fsgofer/filter/filter_precompiled.go
//
// The named file is the module's stub (no programs, and
// PrecompilationDisabledAtBuildTime = true); it is rewritten with every
// program registered. runsc still compiles a filter at start for any option
// set that has no precompiled program, so a missing program costs time,
// never correctness.
package main

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

// The stub's lines this program rewrites; if gVisor changes them, it fails
// rather than write a file runsc would not use.
const (
	registration = "\tprograms := make(map[string]precompiledseccomp.Program)\n"
	disabled     = "const PrecompilationDisabledAtBuildTime = true\n"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "precompile:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: precompile boot|gofer FILTER_PRECOMPILED_GO")
	}
	var programs []precompiledseccomp.Program
	var err error
	switch args[0] {
	case "boot":
		programs, err = bootconfig.PrecompiledPrograms()
	case "gofer":
		programs, err = goferconfig.PrecompiledPrograms()
	default:
		return fmt.Errorf("%q is neither boot nor gofer", args[0])
	}
	if err != nil {
		return err
	}
	if len(programs) == 0 {
		return fmt.Errorf("%s: no programs to precompile", args[0])
	}
	sort.Slice(programs, func(i, j int) bool { return programs[i].Name < programs[j].Name })
	stub, err := os.ReadFile(args[1])
	if err != nil {
		return err
	}
	if bytes.Count(stub, []byte(registration)) != 1 || bytes.Count(stub, []byte(disabled)) != 1 {
		return fmt.Errorf("%s is not the stub this program knows (no single %q and %q): update scripts/runsc-seccomp for this gVisor version", args[1], strings.TrimSpace(registration), strings.TrimSpace(disabled))
	}
	var reg strings.Builder
	reg.WriteString(registration)
	seen := map[string]bool{}
	for _, p := range programs {
		if seen[p.Name] {
			return fmt.Errorf("two programs are named %q", p.Name)
		}
		seen[p.Name] = true
		fmt.Fprintf(&reg, "\tprograms[%q] = %s\n", p.Name, p.Expr("\t", "precompiledseccomp"))
	}
	out := strings.Replace(string(stub), registration, reg.String(), 1)
	out = strings.Replace(out, disabled, "const PrecompilationDisabledAtBuildTime = false\n", 1)
	if err := os.WriteFile(args[1], []byte(out), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d seccomp programs precompiled\n", args[0], len(programs))
	return nil
}
