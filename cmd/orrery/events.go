package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orreryv1 "github.com/orrery-dev/orrery/api/gen/orrery/v1"
	"github.com/orrery-dev/orrery/internal/event"
)

func newEventsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Publish events: each starts the runs of the jobs whose schedule.event names its type"}
	var typ, id, data, dataFile, at string
	publish := &cobra.Command{
		Use:   "publish --type TYPE --id ID [--data JSON | --data-file FILE] [--time RFC3339]",
		Short: "Publish an event to the key's tenant (a repeat of its --id is a duplicate: it starts nothing)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &orreryv1.PublishRequest{Type: typ, Id: id}
			if data != "" && dataFile != "" {
				return fmt.Errorf("give --data or --data-file, not both")
			}
			if dataFile != "" {
				f, err := os.Open(dataFile)
				if err != nil {
					return err
				}
				b, err := io.ReadAll(io.LimitReader(f, event.MaxData+1)) // a file of any size is not read whole
				f.Close()
				if err != nil {
					return err
				}
				if len(b) > event.MaxData {
					return fmt.Errorf("--data-file %s: more than %d bytes; an event's data is at most that", dataFile, event.MaxData)
				}
				data = string(b)
			}
			if data != "" {
				req.Data = new(structpb.Struct)
				if err := protojson.Unmarshal([]byte(data), req.Data); err != nil {
					return fmt.Errorf("--data: a JSON object: %w", err)
				}
			}
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--time %q: an RFC 3339 instant such as 2026-12-31T23:59:59Z", at)
				}
				req.Time = timestamppb.New(t)
			}
			res, err := g.eventClient().Publish(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			if res.Msg.GetDuplicate() {
				fmt.Fprintf(cmd.OutOrStdout(), "event %s (a duplicate of the one received %s: nothing starts)\n", res.Msg.GetEventId(), ts(res.Msg.GetReceiveTime()))
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "event %s received %s\n", res.Msg.GetEventId(), ts(res.Msg.GetReceiveTime()))
			return nil
		},
	}
	publish.Flags().StringVar(&typ, "type", "", "the event's type, as schedule.event.type names it")
	publish.Flags().StringVar(&id, "id", "", "the event's id: a repeat of it is a duplicate")
	publish.Flags().StringVar(&data, "data", "", "the event's data: a JSON object (event.data in expressions)")
	publish.Flags().StringVar(&dataFile, "data-file", "", "read the event's data (a JSON object) from this file")
	publish.Flags().StringVar(&at, "time", "", "when it happened, RFC 3339 (default: when it is received)")
	cmd.AddCommand(publish)
	return cmd
}
