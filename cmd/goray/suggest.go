package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/goray-dev/goray/config"
)

// addSuggestions makes every command that has subcommands (goray,
// goray list, goray plugins, ...) refuse an unknown subcommand with "did
// you mean" (or the list of subcommands) in one format; cobra does it only
// for the root.
func addSuggestions(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() {
			orig := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				if len(args) == 0 {
					if orig != nil {
						return orig(cmd, args)
					}
					return nil
				}
				msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
				var names []string
				for _, sub := range cmd.Commands() {
					if sub.IsAvailableCommand() {
						names = append(names, sub.Name())
						names = append(names, sub.Aliases...)
					}
				}
				if s := config.Suggest(args[0], names); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				} else {
					msg += " (one of: " + strings.Join(names, ", ") + ")"
				}
				return usagef("%s", msg)
			}
			if c.Run == nil && c.RunE == nil {
				// Without a Run cobra prints the help instead of calling
				// Args; a Run that prints the help keeps that for no args.
				c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// flagError adds "did you mean" to cobra's unknown-flag errors.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		var names []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
		if s := config.Suggest(name, names); s != "" {
			msg += fmt.Sprintf("; did you mean --%s?", s)
		}
	}
	return &usageError{msg: msg}
}
