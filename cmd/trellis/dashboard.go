package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"trellis/dashboard"
	"trellis/train"
	"trellis/viz"
)

// hubObserver feeds a training run to the dashboard hub; every call only
// appends under a short lock (the training loop never waits on browsers).
type hubObserver struct{ h *dashboard.Hub }

func (o hubObserver) Start(ri train.RunInfo)       { o.h.Start(viz.Info(ri)) }
func (o hubObserver) Step(line []byte)             { o.h.Step(line) }
func (o hubObserver) Sample(step int, text string) { o.h.Sample(step, text) }

// liveDashboard is a running dashboard server.
type liveDashboard struct {
	hub *dashboard.Hub
	srv *http.Server
	url string
}

// startDashboard listens on addr (e.g. ":8080"), serves the dashboard and
// sets o.Observer. Stop it with finish.
func startDashboard(addr string, o *train.Options, log *slog.Logger) (*liveDashboard, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--dashboard %s: %w", addr, err)
	}
	hub := dashboard.New(dashboard.Config{Log: log})
	d := &liveDashboard{hub: hub, srv: &http.Server{Handler: hub.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	d.url = "http://" + ln.Addr().String() + "/"
	go d.srv.Serve(ln)
	if log != nil {
		log.Info("dashboard", "url", d.url)
	}
	o.Observer = hubObserver{hub}
	return d, nil
}

// finish tells browsers how the run ended, lets them take the last frame
// (up to two seconds) and closes the server.
func (d *liveDashboard) finish(runErr error) {
	status := "finished"
	if runErr != nil {
		status = "stopped: " + runErr.Error()
	}
	d.hub.Finish(status)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if d.srv.Shutdown(ctx) != nil {
		d.srv.Close()
	}
}
