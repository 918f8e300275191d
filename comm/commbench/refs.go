package commbench

import (
	"fmt"
	"net"
	"sort"
	"time"
)

// refBytes is the buffer both references move per repetition.
const refBytes = 64 << 20

// MemcpyGBps measures copy bandwidth: bytes copied per second (counted
// once, not read plus write) between two 64 MiB buffers, the median of
// reps repetitions after one warm-up.
func MemcpyGBps(reps int) float64 {
	src, dst := make([]byte, refBytes), make([]byte, refBytes)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	ts := make([]float64, reps)
	for i := range ts {
		start := time.Now()
		copy(dst, src)
		ts[i] = time.Since(start).Seconds()
	}
	return refBytes / median(ts) / 1e9
}

// TCPStreamGBps measures one loopback TCP stream with the kernel's default
// socket settings (as comm/tcp uses them): a copy of a 64 MiB buffer into
// another, a goroutine writing it in 1 MiB blocks and another reading them
// into place, for reps repetitions after one warm-up; the result is the
// median repetition's bytes per second.
func TCPStreamGBps(reps int) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("commbench: tcp reference: %w", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, fmt.Errorf("commbench: tcp reference: %w", err)
	}
	defer w.Close()
	r, ok := <-accepted
	if !ok {
		return 0, fmt.Errorf("commbench: tcp reference: accept failed")
	}
	defer r.Close()
	ts := make([]float64, reps+1)
	const block = 1 << 20
	wbuf, rbuf := make([]byte, refBytes), make([]byte, refBytes)
	for i := range ts {
		werr := make(chan error, 1)
		start := time.Now()
		go func() {
			var err error
			for sent := 0; sent < refBytes && err == nil; sent += block {
				_, err = w.Write(wbuf[sent : sent+block])
			}
			werr <- err
		}()
		for got := 0; got < refBytes; {
			n, err := r.Read(rbuf[got:min(got+block, refBytes)])
			if err != nil {
				return 0, fmt.Errorf("commbench: tcp reference: %w", err)
			}
			got += n
		}
		if err := <-werr; err != nil {
			return 0, fmt.Errorf("commbench: tcp reference: %w", err)
		}
		ts[i] = time.Since(start).Seconds()
	}
	return refBytes / median(ts[1:]) / 1e9, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
