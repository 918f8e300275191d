package launch

import "syscall"

// sysProcAttr makes the kernel kill a worker if the launcher dies, so no
// worker outlives a killed launcher.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
