package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSpec32KernelQualificationFromDist (spec §3.2, host process identity):
// a binary-only installation — the `make dist` tarballs unpacked under a
// temporary prefix, no source tree, no Go toolchain on the path — on a
// host whose system-wide qualification record is out of the way:
//
//   - `lazaret run -- true` and `lazaret doctor` refuse the unqualified
//     build, and doctor fails exactly the kernel check, naming the one
//     command to run;
//   - `lazaret kernel qualify` as the developer runs the suite with the
//     installed binaries and writes a per-user record with the build, boot,
//     date, version and the suite's full output;
//   - a record made group-writable is refused with the fix;
//   - then `lazaret run -- true` runs, and doctor names the record.
func TestSpec32KernelQualificationFromDist(t *testing.T) {
	e := need(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(e.base, "dist-"+randHex(3))
	mk := exec.Command("make", "--no-print-directory", "-C", repo, "dist-files", "BIN="+e.bin, "DIST_DIR="+dist)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make dist-files: %v\n%s", err, out)
	}
	tarballs, _ := filepath.Glob(filepath.Join(dist, "*.tar.gz"))
	if len(tarballs) != 7 {
		t.Fatalf("make dist made %d tarballs, want 7 (lazaret, lazaret-cli, lazaret-hc, lazaret-rs, lazaret-gitroute, lazaret-escalate, lazaret-init): %v", len(tarballs), tarballs)
	}
	prefix := filepath.Join(e.base, "prefix-"+randHex(3))
	os.MkdirAll(prefix, 0o755)
	for _, tb := range tarballs {
		if out, err := exec.Command("tar", "-C", prefix, "-xzf", tb).CombinedOutput(); err != nil {
			t.Fatalf("untar %s: %v\n%s", tb, err, out)
		}
	}

	// Out of the way for this test: the system-wide records (make test
	// wrote one for this build). Put back whatever happens.
	const sys = "/etc/lazaret/kernels.d"
	hidden := sys + ".hidden-by-test"
	if _, err := os.Stat(sys); err == nil {
		if err := os.Rename(sys, hidden); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.Rename(hidden, sys); err != nil {
				t.Errorf("restore %s: %v", sys, err)
			}
		})
	}

	cfgHome := e.userDir("dist-config-" + randHex(3))
	ws := workspace(t)
	run := func(args ...string) result {
		t.Helper()
		c := exec.Command(filepath.Join(prefix, "bin/lazaret"), args...)
		c.Dir = ws
		c.Env = []string{
			"HOME=" + e.home, "USER=" + *flagUser, "PATH=" + filepath.Join(prefix, "bin") + ":/usr/bin:/bin",
			"XDG_STATE_HOME=" + e.stateHome, "XDG_RUNTIME_DIR=" + e.runtime, "XDG_CONFIG_HOME=" + cfgHome,
			"LAZARET_RUNSC=" + e.runsc, "LANG=C.UTF-8",
		}
		c.Env = append(c.Env, modelTraceEnv(c.Dir)...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(e.uid), Gid: uint32(e.gid)}, Setpgid: true}
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); c.ProcessState == nil {
			t.Fatalf("lazaret %v: %v", args, err)
		}
		return result{out.String(), errb.String(), c.ProcessState.ExitCode()}
	}

	var uts unix.Utsname
	unix.Uname(&uts)
	release, version := unix.ByteSliceToString(uts.Release[:]), unix.ByteSliceToString(uts.Version[:])
	embedded := false
	if b, err := os.ReadFile(filepath.Join(repo, "pkg/hostcheck/qualified-kernels.txt")); err == nil {
		embedded = bytes.Contains(b, []byte(release+"\t"+version+"\t"))
	}
	if embedded {
		t.Logf("the running build %s %s is on the embedded list: the unqualified refusal cannot be shown here", release, version)
	} else {
		r := run("run", "--", "true")
		if r.code != 125 || !strings.Contains(r.stderr, "run `lazaret kernel qualify` once") {
			t.Fatalf("unqualified build: lazaret run exit %d, want 125 naming `lazaret kernel qualify`\nstderr: %s", r.code, r.stderr)
		}
		r = run("doctor")
		var failed []string
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "FAIL") {
				failed = append(failed, l)
			}
		}
		if r.code != 1 || len(failed) != 1 || !strings.HasPrefix(strings.Join(strings.Fields(failed[0]), " "), "FAIL kernel ") || !strings.Contains(failed[0], "lazaret kernel qualify") {
			t.Fatalf("doctor on an unqualified build: exit %d, want exactly the kernel check failed with the command:\n%s", r.code, r.stdout)
		}
	}

	r := run("kernel", "qualify")
	if r.code != 0 {
		t.Fatalf("kernel qualify: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	recDir := filepath.Join(cfgHome, "lazaret", "kernels.d")
	for _, want := range []string{"support probe pidfs-host-support-probe/v1: passed", "repeated 20 times: passed", "500 consecutive processes",
		"wrapper barrier: passed", "exec-stop barrier: passed", "qualification: PASSED", "record written to " + recDir + "/"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("kernel qualify output lacks %q:\n%s", want, r.stdout)
		}
	}
	files, _ := filepath.Glob(filepath.Join(recDir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("records in %s: %v", recDir, files)
	}
	var rec struct {
		Format                    int
		Release, Version, Machine string
		QualifiedAt               string `json:"qualified_at"`
		Suite, Output             string
	}
	b, _ := os.ReadFile(files[0])
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	var withKeys map[string]any
	json.Unmarshal(b, &withKeys)
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if rec.Format != 1 || rec.Release != release || rec.Version != version || rec.Machine != "x86_64" ||
		withKeys["boot_id"] != strings.TrimSpace(string(boot)) || withKeys["lazaret_version"] == "" || withKeys["lazaret_version"] == "dev" ||
		rec.QualifiedAt == "" || rec.Suite != "kernel-qualification/v1" || !strings.Contains(rec.Output, "qualification: PASSED") || !strings.Contains(rec.Output, "exec-stop barrier: passed") {
		t.Fatalf("record %s:\n%s", files[0], b)
	}
	st, _ := os.Stat(files[0])
	if owner := int(st.Sys().(*syscall.Stat_t).Uid); owner != e.uid || st.Mode().Perm() != 0o644 {
		t.Errorf("record owned by %d mode %v, want the developer's, 0644", owner, st.Mode())
	}

	// A record directory anyone else could write is refused, with the fix.
	os.Chmod(recDir, 0o775)
	r = run("kernel", "status")
	if r.code != 1 || !strings.Contains(r.stdout, "refused") || !strings.Contains(r.stdout, "chmod go-w "+recDir) {
		t.Errorf("group-writable record directory: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !embedded {
		if r := run("run", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "chmod go-w "+recDir) {
			t.Errorf("run with a group-writable record directory: exit %d\n%s", r.code, r.stderr)
		}
	}
	os.Chmod(recDir, 0o755)

	r = run("kernel", "status", "--json")
	var status struct {
		Qualified bool
		Source    string
		Records   []struct {
			Path    string
			Matches bool `json:"matches_running_build"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &status); err != nil || r.code != 0 || !status.Qualified || len(status.Records) != 1 || !status.Records[0].Matches {
		t.Fatalf("kernel status --json: exit %d %v\n%s", r.code, err, r.stdout)
	}
	if !embedded && status.Source != files[0] {
		t.Errorf("qualified by %q, want the new record %s", status.Source, files[0])
	}
	r = run("doctor")
	if r.code != 0 || (!embedded && !strings.Contains(r.stdout, "qualified by record "+files[0])) {
		t.Errorf("doctor after qualification: exit %d\n%s", r.code, r.stdout)
	}
	r = run("run", "--", "true")
	if r.code != 0 {
		t.Fatalf("lazaret run -- true from the dist install: exit %d\nstderr: %s", r.code, r.stderr)
	}
	noLeftovers(t)
}
