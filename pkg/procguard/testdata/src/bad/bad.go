package bad

import (
	"os"
	"os/exec"
	"syscall"
)

func spawnAndReap() {
	c := exec.Command("true")
	c.Start()               // want `\(\*os/exec.Cmd\).Start \(spawn\) outside the process broker`
	c.Wait()                // want `\(\*os/exec.Cmd\).Wait \(wait/reap\) outside the process broker`
	exec.Command("x").Run() // want `\(\*os/exec.Cmd\).Run`
}

func numericSignals(pid int) {
	syscall.Kill(pid, syscall.SIGTERM) // want `syscall.Kill \(numeric-pid signal\)`
	p, _ := os.FindProcess(pid)        // want `os.FindProcess`
	p.Signal(os.Interrupt)             // want `\(\*os.Process\).Signal`
	kill := syscall.Kill               // want `syscall.Kill`
	_ = kill
}

func reap() {
	var ws syscall.WaitStatus
	syscall.Wait4(-1, &ws, 0, nil) // want `syscall.Wait4 \(wait/reap\)`
}

type runtime struct{ path string }

func (r runtime) argv(sub ...string) []string { return append([]string{r.path}, sub...) }

// runscNumericSignals builds the runsc command lines that SIGKILL the state
// file's host pids.
func runscNumericSignals(r runtime, id string) {
	r.argv("kill", "--all", id, "KILL")                        // want `runsc argv: kill --all \(numeric-pid signal`
	r.argv("delete", "-force", id)                             // want `runsc argv: delete \(numeric-pid signal`
	r.argv("delete", id)                                       // want `runsc argv: delete`
	_ = []string{r.path, "--root=/r", "kill", "-all=true", id} // want `runsc argv: kill --all`
	_ = append([]string{r.path}, "delete", "--force", id)      // want `runsc argv: delete`
}

// guestSignals address guest pids inside the sandbox: not host numeric-pid
// signals, so not reported.
func guestSignals(r runtime, id string) {
	r.argv("kill", "--pid=7", id, "TERM")
	r.argv("kill", "--pgid=7", id, "INT")
	_ = append([]string{"reset"}, "--all")
}
