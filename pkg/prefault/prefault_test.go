package prefault

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestInitPopulatesExecutable runs a copy of this test binary (which
// imports the package) whose pages are not in the page cache, so that
// nothing but the init's populate maps it whole: without it, the child's
// start maps only what it runs and the kernel's read-around brings in.
func TestInitPopulatesExecutable(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		return
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	cold := filepath.Join(t.TempDir(), "prefault.test")
	f, err := os.OpenFile(cold, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(self); err != nil {
		t.Fatal(err)
	}
	// Written back, its cached pages can be dropped.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	f.Close()
	c := exec.Command(cold, "-test.run=^$")
	c.Env = append(os.Environ(), childEnv+"=1")
	c.Stderr = os.Stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("child: %v %s", err, out)
	}
	var populated uintptr
	var size, rss int
	if _, err := fmt.Sscanf(string(out), "%d %d %d", &populated, &size, &rss); err != nil {
		t.Fatalf("child said %q: %v", out, err)
	}
	t.Logf("read-only mappings of a cold copy of the test binary: %d kB, %d kB resident; %d bytes populated", size, rss, populated)
	if size == 0 || uintptr(size)*1024 != populated {
		t.Fatalf("populated %d bytes of %d kB of read-only mappings (a kernel before 5.14 has no MADV_POPULATE_READ)", populated, size)
	}
	if rss*100 < size*99 {
		t.Fatalf("only %d of %d kB of the read-only mappings are resident", rss, size)
	}
}

const childEnv = "LAZARET_PREFAULT_TEST_CHILD"

// TestMain is, in the child of TestInitPopulatesExecutable, the report of
// what the init populated and what of the executable is resident.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "" {
		os.Exit(m.Run())
	}
	size, rss := readOnlySmaps()
	fmt.Println(Populated, size, rss)
	os.Exit(0)
}

// readOnlySmaps sums Size and Rss (kB) of this process's read-only private
// mappings of its executable.
func readOnlySmaps() (size, rss int) {
	exe, _ := os.Readlink("/proc/self/exe")
	b, _ := os.ReadFile("/proc/self/smaps")
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4 {
			in = len(f) >= 6 && strings.Join(f[5:], " ") == exe && f[1][1] != 'w' && f[1][3] == 'p'
			continue
		}
		if in && len(f) >= 2 && (f[0] == "Size:" || f[0] == "Rss:") {
			n, _ := strconv.Atoi(f[1])
			if f[0] == "Size:" {
				size += n
			} else {
				rss += n
			}
		}
	}
	return size, rss
}

// TestImportsOnlySyscall keeps the init early: the runtime initialises a
// package as soon as its imports are, so one that imports only syscall and
// pkg/procmaps, which imports nothing, runs before the program's heavy
// initialisers.
func TestImportsOnlySyscall(t *testing.T) {
	const procmaps = "github.com/lazaret/lazaret/pkg/procmaps"
	for dir, allowed := range map[string][]string{".": {"syscall", procmaps}, "../procmaps": nil} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); !slices.Contains(allowed, p) {
					t.Errorf("%s imports %s: only syscall and pkg/procmaps (which imports nothing) keep the populate ahead of other packages' initialisation", f, p)
				}
			}
		}
	}
}
