package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/orrery-dev/orrery/dag"
)

func newValidateCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "validate -f FILE|DIR",
		Short: "Check Job YAML files without a server; list every problem as file:line:col: message",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := yamlFiles(path)
			if err != nil {
				return err
			}
			var all dag.Errors
			jobs := 0
			for _, f := range files {
				data, err := readYAMLFile(f)
				if err != nil {
					return err
				}
				docs, es := dag.Decode(f, data)
				jobs += len(docs)
				all = append(all, es...)
				for _, d := range docs {
					for _, h := range append(d.Hints(), d.ScheduleWarnings(time.Now())...) {
						fmt.Fprintln(cmd.ErrOrStderr(), h.Error())
					}
				}
			}
			if len(all) > 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), all.Error())
				return fmt.Errorf("%d problem(s) in %d file(s)", len(all), len(files))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d job(s) in %d file(s) are valid\n", jobs, len(files))
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "file", "f", ".", "a YAML file, or a folder searched for *.yaml and *.yml")
	return cmd
}

func yamlFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != path {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

// maxYAMLFile bounds one YAML file the CLI reads (every job in it is
// bounded again when it is decoded and sent).
const maxYAMLFile = 16 << 20

// readYAMLFile reads a regular file of at most maxYAMLFile bytes. A
// folder, a device (/dev/zero) or a FIFO, named or reached through a
// symlink, is refused, not read: the read would never end.
func readYAMLFile(name string) ([]byte, error) {
	// Not even opened unless regular (opening a terminal or a tape has
	// effects), then checked again on what was opened.
	if info, err := os.Stat(name); err != nil {
		return nil, err
	} else if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", name, info.Mode().Type())
	}
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a FIFO swapped in opens without a writer
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", name, info.Mode().Type())
	}
	if info.Size() > maxYAMLFile {
		return nil, fmt.Errorf("%s: %d bytes; the limit is %d", name, info.Size(), maxYAMLFile)
	}
	return readYAML(name, f)
}

// readYAML reads YAML named name from r, at most maxYAMLFile bytes.
func readYAML(name string, r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxYAMLFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxYAMLFile {
		return nil, fmt.Errorf("%s: over %d bytes", name, maxYAMLFile)
	}
	return data, nil
}
