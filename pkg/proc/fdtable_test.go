package proc

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lazaret/lazaret/pkg/pidfs"
)

// TestFDTablePresizesChild: a child spawned with FDTable starts with a
// descriptor table of at least that many slots, holding only its three
// standard descriptors, the ones it was given and /dev/null at FDTable-1
// (every slot between is closed), through Start and both acquisition
// barriers.
func TestFDTablePresizesChild(t *testing.T) {
	const size = 256
	b := testBroker(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	target := Command{Path: "/bin/sleep", Args: []string{"sleep", "30"}, Files: []*os.File{nil, nil, nil, w}, FDTable: size}
	spawns := map[string]func() (*Child, error){
		"start": func() (*Child, error) { return b.Start("t", target) },
	}
	for name, acquire := range barriers {
		spawns[name] = func() (*Child, error) {
			return acquire(b)(context.Background(), AcquireSpec{Slot: "t", Target: target, Stage: func(context.Context, pidfs.Identity) error { return nil }})
		}
	}
	for name, spawn := range spawns {
		t.Run(name, func(t *testing.T) {
			c, err := spawn()
			if err != nil {
				t.Fatal(err)
			}
			defer func() { c.Signal(unix.SIGKILL); c.Wait(context.Background()) }()
			pid := int(c.Identity().HostPID)
			// The target runs once its exec replaced the wrapper's image.
			deadline := time.Now().Add(5 * time.Second)
			for {
				if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); strings.HasSuffix(exe, "/sleep") || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
			if err != nil {
				t.Fatal(err)
			}
			fdSize := -1
			for _, line := range strings.Split(string(status), "\n") {
				if v, ok := strings.CutPrefix(line, "FDSize:"); ok {
					fdSize, _ = strconv.Atoi(strings.TrimSpace(v))
				}
			}
			if fdSize < size {
				t.Errorf("child's descriptor table has %d slots, want at least %d", fdSize, size)
			}
			ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
			if err != nil {
				t.Fatal(err)
			}
			var open []string
			for _, e := range ents {
				open = append(open, e.Name())
			}
			if got, want := strings.Join(open, " "), "0 1 2 255 3"; got != want {
				t.Errorf("child's descriptors %q, want %q", got, want)
			}
			if l, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", strconv.Itoa(size-1))); l != os.DevNull {
				t.Errorf("descriptor %d is %q, want %s", size-1, l, os.DevNull)
			}
		})
	}
}
