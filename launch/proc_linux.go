package launch

import "syscall"

// sysProcAttr makes the kernel kill a worker if the launcher dies, so no
// worker outlives a killed launcher, and puts the workers in their own
// process group, so that a terminal's Ctrl-C reaches the launcher only,
// which forwards it once (see Job.supervise).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
