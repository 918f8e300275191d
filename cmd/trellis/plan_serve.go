package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"trellis/dashboard"
	"trellis/plan"
)

// addServeFlag gives `trellis plan` its --serve flag: with it, the command
// serves the plan explorer (its other flags fill the form) instead of
// printing plans.
func addServeFlag(c *cobra.Command, f *planFlags) {
	var addr string
	c.Flags().StringVar(&addr, "serve", "", "serve the plan explorer at this address, e.g. :8081 (the other flags fill its form)")
	run := c.RunE
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if addr == "" {
			return run(cmd, args)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return servePlans(ctx, addr, *f, cmd.ErrOrStderr())
	}
}

// explorerDefaults fills what the user left out so that the page opens on
// a search: one node of DGX H100s training Llama 3 8B.
func explorerDefaults(f planFlags) dashboard.PlanInputs {
	in := dashboard.PlanInputs{Model: f.model, Cluster: f.cluster, Devices: f.devices, Seq: f.seq, Batch: f.batch, Fix: f.fix, Top: f.top}
	if in.Model == "" {
		in.Model = "llama3-8b"
	}
	if in.Cluster == "" {
		in.Cluster = "dgx-h100"
	}
	if in.Seq == 0 {
		in.Seq = 8192
	}
	if in.Batch == 0 {
		in.Batch = 64
	}
	return in
}

// newExplorer is the explorer handler; its jobs are built by planJob, as
// `trellis plan` builds them. A page may name presets, and the files given
// on the command line, but no other file: the server reads nothing a
// browser chooses.
func newExplorer(f planFlags) http.Handler {
	return dashboard.Explorer(dashboard.ExplorerConfig{
		Defaults: explorerDefaults(f),
		Job: func(in dashboard.PlanInputs) (plan.Job, error) {
			if _, err := plan.ModelPreset(in.Model); err != nil && in.Model != f.model {
				return plan.Job{}, err
			}
			if _, err := plan.ClusterPreset(in.Cluster); err != nil && in.Cluster != f.cluster {
				return plan.Job{}, err
			}
			return planJob(planFlags{model: in.Model, cluster: in.Cluster, devices: in.Devices, seq: in.Seq, batch: in.Batch, top: max(in.Top, 1)})
		},
	})
}

// servePlans serves the explorer until ctx ends: on loopback for a bare
// port (":8081"), elsewhere only when named (warned about without a token).
func servePlans(ctx context.Context, addr string, f planFlags, log io.Writer) error {
	token := os.Getenv(dashboard.EnvToken)
	srv, err := dashboard.Listen(dashboard.ServeConfig{Flag: "--serve", Addr: addr, Handler: newExplorer(f), Token: token})
	if err != nil {
		return err
	}
	if srv.Warning != "" {
		fmt.Fprintf(log, "plan explorer: warning: %s\n", srv.Warning)
	}
	how := ""
	if token != "" {
		how = " (add ?token=$" + dashboard.EnvToken + ")"
	}
	fmt.Fprintf(log, "plan explorer: %s%s (Ctrl-C stops)\n", srv.URL, how)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}
