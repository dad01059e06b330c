package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/engine/worker"
	"github.com/orrery-dev/orrery/internal/metrics"
	"github.com/orrery-dev/orrery/internal/tracing"
)

func newWorkerCmd(g *globals) *cobra.Command {
	var dbs dbFlags
	var st stackFlags
	cmd := &cobra.Command{
		Use:   "worker --queue NAME=CONCURRENCY ...",
		Short: "Run worker pools: River clients for the named queues, executing tasks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			queues, err := st.queues()
			if err != nil {
				return err
			}
			if len(queues) == 0 {
				return errors.New("--queue NAME=CONCURRENCY is required, at least once")
			}
			ctx := cmd.Context()
			popts, err := st.poolOptions()
			if err != nil {
				return err
			}
			state, queueDBs, closeAll, err := dbs.pools(ctx, popts)
			if err != nil {
				return err
			}
			defer closeAll()
			g.watchOutage(state)
			fp, err := failpoints()
			if err != nil {
				return err
			}
			stopTracing, err := tracing.Setup(ctx)
			if err != nil {
				return fmt.Errorf("OTEL_*: %w", err)
			}
			defer stopTracing(context.WithoutCancel(ctx))
			mets := metrics.New()
			cfg, err := st.sandbox(worker.Config{StatePool: state, QueueDBs: queueDBs, Queues: queues, Tenants: st.tenants, Name: st.name,
				LeaseTTL: st.leaseTTL, Logger: g.logger(), Failpoints: fp, Metrics: mets})
			if err != nil {
				return err
			}
			w, err := worker.New(cfg)
			if err != nil {
				return err
			}
			if st.metricsAddr == "" {
				return w.Run(ctx)
			}
			serve, err := serveMetrics(st.metricsAddr, st.allowedHosts, mets)
			if err != nil {
				return err
			}
			return runAll(ctx, w.Run, serve)
		},
	}
	dbs.register(cmd.Flags())
	st.register(cmd.Flags(), false)
	return cmd
}
