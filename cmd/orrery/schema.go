package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/dag"
)

func newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the Job YAML, for editors (yaml-language-server)",
		Long: `schema prints a JSON Schema of the Job resource. Save it and point your
editor at it, for instance with a first line in each file:

  # yaml-language-server: $schema=./orrery-job.schema.json

The schema catches unknown fields and bad enum values as you type;
orrery validate checks the rest (names, cron fields, time zones, cycles).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := dag.JSONSchema()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return err
		},
	}
}
