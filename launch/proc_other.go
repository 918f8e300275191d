//go:build !linux

package launch

import "syscall"

// sysProcAttr: only Linux can tie a worker's life to the launcher's.
func sysProcAttr() *syscall.SysProcAttr { return nil }
