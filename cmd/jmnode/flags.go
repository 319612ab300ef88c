package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// parseFlags parses args into fs, then fills every flag not given on the command line from
// the environment (JMNODE_<NAME>, dashes as underscores) and then from the optional JSON config
// file named by --config (keys are flag names). Command line > environment > file > default.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var configPath string
	if fs.Lookup("config") == nil {
		fs.StringVar(&configPath, "config", "", "optional JSON config file whose keys are flag names (env JMNODE_CONFIG)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if configPath == "" {
		configPath = os.Getenv("JMNODE_CONFIG")
	}
	file := map[string]any{}
	if configPath != "" {
		b, err := os.ReadFile(configPath)
		if err != nil {
			return fmt.Errorf("--config %s: %w", configPath, err)
		}
		if err := json.Unmarshal(b, &file); err != nil {
			return fmt.Errorf("--config %s: %w", configPath, err)
		}
		for k := range file {
			if fs.Lookup(k) == nil {
				return fmt.Errorf("--config %s: unknown key %q (keys are flag names)", configPath, k)
			}
		}
	}
	var firstErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || firstErr != nil {
			return
		}
		env := "JMNODE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				firstErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			s := fmt.Sprint(v)
			if list, ok := v.([]any); ok {
				parts := make([]string, len(list))
				for i, p := range list {
					parts[i] = fmt.Sprint(p)
				}
				s = strings.Join(parts, ",")
			}
			if err := f.Value.Set(s); err != nil {
				firstErr = fmt.Errorf("config %s=%q: %w", f.Name, s, err)
			}
		}
	})
	return firstErr
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func usageFor(fs *flag.FlagSet, synopsis, about string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\n%s\n\nflags (each also settable as JMNODE_<FLAG> or in --config FILE):\n", synopsis, about)
		fs.PrintDefaults()
	}
}

// newLogger is the process logger of --log-level and --log-format.
func newLogger(name, level, format string) (hclog.Logger, error) {
	if format != "text" && format != "json" {
		return nil, fmt.Errorf("--log-format %q: text or json", format)
	}
	lv := hclog.LevelFromString(level)
	if lv == hclog.NoLevel {
		return nil, fmt.Errorf("--log-level %q: trace, debug, info, warn or error", level)
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: lv, Output: os.Stderr, JSONFormat: format == "json"}), nil
}
