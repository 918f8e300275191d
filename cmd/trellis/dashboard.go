package main

import (
	"context"
	"log/slog"
	"os"
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
	srv *dashboard.Server
	url string
}

// startDashboard listens on addr (":8080" is loopback; another interface
// must be named, e.g. 0.0.0.0:8080, and is warned about without a token),
// serves the dashboard and sets o.Observer. Stop it with finish.
func startDashboard(addr string, o *train.Options, log *slog.Logger) (*liveDashboard, error) {
	hub := dashboard.New(dashboard.Config{Log: log})
	srv, err := dashboard.Listen(dashboard.ServeConfig{Flag: "--dashboard", Addr: addr, Handler: hub.Handler(), Token: os.Getenv(dashboard.EnvToken)})
	if err != nil {
		return nil, err
	}
	d := &liveDashboard{hub: hub, srv: srv, url: srv.URL}
	go srv.Serve()
	if log != nil {
		if srv.Warning != "" {
			log.Warn("dashboard: unauthenticated", "note", srv.Warning)
		}
		args := []any{"url", d.url}
		if os.Getenv(dashboard.EnvToken) != "" {
			args = append(args, "token", "add ?token=$"+dashboard.EnvToken)
		}
		log.Info("dashboard", args...)
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
