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
