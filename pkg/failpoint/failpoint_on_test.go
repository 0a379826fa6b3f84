//go:build lazaret_failpoints

package failpoint

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// holdChildEnv makes the test binary the child of TestHitWaitsForHold.
const holdChildEnv = "LAZARET_TEST_FAILPOINT_HOLD_CHILD"

// TestHitWaitsForHold: a hit in another goroutine kills the process only
// once the section Hold began has ended. The child holds a section, has
// another goroutine hit the armed stage, says "ended" after 200 ms and ends
// the section; it must say so before it dies by SIGKILL.
func TestHitWaitsForHold(t *testing.T) {
	if os.Getenv(holdChildEnv) != "" {
		end := Hold()
		go Hit("test:stage")
		time.Sleep(200 * time.Millisecond)
		os.Stdout.WriteString("ended\n")
		end()
		select {}
	}
	c := exec.Command(os.Args[0], "-test.run=^TestHitWaitsForHold$")
	c.Env = append(os.Environ(), holdChildEnv+"=1", Env+"=test:stage")
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = c.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "ended") {
		t.Fatalf("the hit killed the child inside a held section (stdout %q)", lines)
	}
}
