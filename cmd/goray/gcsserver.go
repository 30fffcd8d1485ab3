package main

import (
	"os/signal"
	"syscall"

	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/spf13/cobra"
)

// gcsServerCmd is the GCS process a head runs (node.Options.GCSCommand):
// hidden, as it takes its settings from the environment the head gives it.
func (a *app) gcsServerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gcs-server",
		Short:  "Run a head's GCS (started by `goray start --head`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			spec, err := node.GCSSpecFromEnv()
			if err != nil {
				return usagef("%v", err)
			}
			creds, err := auth.FromEnv()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return node.RunGCS(ctx, spec, creds)
		}),
	}
}
