package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"trellis/train"
)

// syncWriter hands each write to the reading goroutine.
type syncWriter struct {
	ch chan string
}

func (w syncWriter) Write(p []byte) (int, error) { w.ch <- string(p); return len(p), nil }

// Issue 29: --dashboard :8080 and plan --serve :8081 listened on every
// interface (*:PORT). A bare port is now loopback.
func TestServersBindLoopback(t *testing.T) {
	var opts train.Options
	d, err := startDashboard(":0", &opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.url, "http://127.0.0.1:") {
		t.Errorf("--dashboard :0 serves at %s, want 127.0.0.1", d.url)
	}
	d.finish(nil)
	ctx, cancel := context.WithCancel(context.Background())
	w := syncWriter{ch: make(chan string, 4)}
	done := make(chan error, 1)
	go func() { done <- servePlans(ctx, ":0", planFlags{top: 3}, w) }()
	select {
	case line := <-w.ch:
		if !strings.HasPrefix(line, "plan explorer: http://127.0.0.1:") {
			t.Errorf("plan --serve :0 says %q, want 127.0.0.1", line)
		}
	case err := <-done:
		t.Fatalf("servePlans: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no address printed")
	}
	cancel()
	<-done
}
