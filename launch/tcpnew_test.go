package launch

import (
	"trellis/comm"
	"trellis/comm/tcp"
)

func tcpNew(cfg tcp.Config) (comm.Group, error) { return tcp.New(cfg) }
