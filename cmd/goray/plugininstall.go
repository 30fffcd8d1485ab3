package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
	"github.com/goray-dev/goray/host/node"
	"github.com/goray-dev/goray/internal/digest"
	"github.com/goray-dev/goray/sdk/plugin"
)

// installOptions are the flags of `goray plugins install`.
type installOptions struct {
	configPath string
	pluginDir  string
	kind, name string
	timeout    time.Duration
}

func (a *app) pluginsInstallCmd() *cobra.Command {
	var o installOptions
	cmd := &cobra.Command{
		Use:   "install SOURCE",
		Short: "Install a plugin binary into the config's plugin_dir as goray-<kind>-<name> and lock its sha256",
		Long: `Install a plugin into the plugin_dir of a node config, under the name the
node looks for (goray-<kind>-<name>, asked of the plugin itself), and record
its sha256 in the lock file next to the config (` + config.LockFileName + `): the
node refuses to start a locked binary whose checksum differs.

SOURCE is one of:
  a plugin binary            ./goray-storage-s3, /opt/plugins/s3
  a Go module path@version   github.com/goray-dev/goray/plugins/s3@v1.2.0
                             (go install, in module mode: needs the module proxy or GOPROXY)
  a Go package or directory  ./plugins/s3, github.com/goray-dev/goray/plugins/s3
                             (go build, resolved in the current directory's module)`,
		Args: cobra.ExactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if o.timeout <= 0 {
				return usagef("invalid --timeout %s: it must be positive", o.timeout)
			}
			if o.kind != "" && !slices.Contains(plugin.Kinds, o.kind) {
				return usagef("unknown --kind %q: the kinds are %s", o.kind, strings.Join(plugin.Kinds, ", "))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			return a.installPlugin(ctx, o, args[0])
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&o.configPath, "config", "goray.hcl", "node config file: its plugin_dir receives the binary and the lock file goes next to it")
	fs.StringVar(&o.pluginDir, "plugin-dir", "", "install into this directory instead of the config's plugin_dir")
	fs.StringVar(&o.kind, "kind", "", "expected kind ("+strings.Join(plugin.Kinds, ", ")+"); default: whatever the plugin says")
	fs.StringVar(&o.name, "name", "", "install as goray-<kind>-<name> (default: the name the plugin reports)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "bound on building and checking the plugin")
	return cmd
}

// installPlugin builds or copies src into the plugin directory, asks the
// binary who it is, names it goray-<kind>-<name> and locks its sha256.
func (a *app) installPlugin(ctx context.Context, o installOptions, src string) error {
	dir, cfg, err := installDir(o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating plugin_dir: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".goray-install-*")
	if err != nil {
		return fmt.Errorf("installing into plugin_dir: %w", err)
	}
	tmpPath := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpPath)
	source, err := fetchPlugin(ctx, src, tmpPath)
	if err != nil {
		return err
	}
	rep, err := host.Check(ctx, tmpPath, o.kind)
	if err != nil {
		var km *host.KindMismatchError
		if errors.As(err, &km) {
			return fmt.Errorf("%s is a %q plugin, not a %q plugin (--kind)", src, km.Got, km.Want)
		}
		return fmt.Errorf("%s: %w", src, err)
	}
	name := rep.Name
	if o.name != "" {
		name = o.name
	}
	if why := config.PluginNameProblem(name); why != "" || name == "" {
		return fmt.Errorf("cannot install plugin %s %q: its name %s", rep.Kind, name, why)
	}
	sum, err := digest.FileSHA256(tmpPath)
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "goray-"+rep.Kind+"-"+name)
	if err := os.Rename(tmpPath, bin); err != nil {
		return fmt.Errorf("installing plugin: %w", err)
	}
	lock, err := config.LoadLock(config.LockPath(o.configPath))
	if err != nil {
		return err
	}
	key, err := lock.Key(bin)
	if err != nil {
		return err
	}
	lock.Put(config.LockedPlugin{Binary: key, Kind: rep.Kind, Name: name, Version: rep.Version, Source: source, SHA256: sum})
	if err := lock.Save(); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "Installed %s plugin %q (version %s) as %s\n", rep.Kind, name, orDash(rep.Version), underWorkDir(bin))
	fmt.Fprintf(a.stdout, "Locked sha256 %s in %s\n", sum, lock.Filename)
	if cfg != nil && !declares(cfg, rep.Kind, name, bin) {
		fmt.Fprintf(a.stdout, "Declare it in %s:\n  plugin %q %q {\n    config { ... }\n  }\n", o.configPath, rep.Kind, name)
	}
	return nil
}

// installDir is the plugin directory to install into: --plugin-dir, else
// the config's plugin_dir (relative to the config file). cfg is the loaded
// config, nil when the file does not exist.
func installDir(o installOptions) (string, *config.Node, error) {
	var cfg *config.Node
	if _, err := os.Stat(o.configPath); err == nil {
		n, diags := config.Load(o.configPath)
		if err := config.NewDiagnosticsError(diags, n.Files()); err != nil {
			return "", nil, err
		}
		cfg = n
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, err
	}
	switch {
	case o.pluginDir != "":
		return o.pluginDir, cfg, nil
	case cfg == nil:
		return "", nil, usagef("config file %s does not exist: give --config FILE (its plugin_dir receives the plugin) or --plugin-dir DIR", o.configPath)
	case cfg.PluginDir == "":
		return "", nil, usagef("%s sets no plugin_dir: add plugin_dir = \"plugins\" to it, or give --plugin-dir DIR", o.configPath)
	}
	return node.PluginDir(cfg), cfg, nil
}

// fetchPlugin puts the plugin of src at out: a copy of a binary, or one
// built with the Go toolchain. It returns what the lock file records as
// the plugin's source.
func fetchPlugin(ctx context.Context, src, out string) (string, error) {
	fi, statErr := os.Stat(src)
	switch {
	case statErr == nil && fi.Mode().IsRegular():
		abs, err := filepath.Abs(src)
		if err != nil {
			return "", err
		}
		return abs, copyBinary(abs, out)
	case statErr == nil && fi.IsDir(), statErr != nil && !strings.Contains(src, "@"):
		if statErr != nil && (strings.HasPrefix(src, ".") || filepath.IsAbs(src)) {
			return "", fmt.Errorf("plugin source %s: %w", src, statErr)
		}
		absOut, err := filepath.Abs(out)
		if err != nil {
			return "", err
		}
		if statErr != nil { // a package path, resolved in the current module
			return src, goTool(ctx, "", nil, "build", "-o", absOut, src)
		}
		abs, err := filepath.Abs(src) // a directory: built in its own module
		if err != nil {
			return "", err
		}
		return abs, goTool(ctx, abs, nil, "build", "-o", absOut, ".")
	}
	// module@version: go install in module mode, into a directory of its own.
	gobin, err := os.MkdirTemp(filepath.Dir(out), ".goray-gobin-*")
	if err != nil {
		return "", err
	}
	if gobin, err = filepath.Abs(gobin); err != nil { // go install wants it so
		return "", err
	}
	defer os.RemoveAll(gobin)
	if err := goTool(ctx, "", []string{"GOBIN=" + gobin}, "install", src); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(gobin)
	if err != nil {
		return "", err
	}
	if len(ents) != 1 {
		return "", fmt.Errorf("go install %s made %d files, want one binary", src, len(ents))
	}
	return src, os.Rename(filepath.Join(gobin, ents[0].Name()), out)
}

// goTool runs the go command in dir ("": the current directory) with env
// added to this process's.
func goTool(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("building the plugin needs the Go toolchain (go) on PATH: %w", err)
		}
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// copyBinary copies the file at from to to, executable.
func copyBinary(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("reading plugin binary: %w", err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		return fmt.Errorf("installing plugin: %w", err)
	}
	return os.Chmod(to, 0o755)
}

// declares reports whether cfg has a block for the plugin installed at bin.
func declares(cfg *config.Node, kind, name, bin string) bool {
	for _, p := range cfg.Plugins {
		if p.Kind == kind && (p.Name == name || p.Command == filepath.Base(bin) || p.Command == bin) {
			return true
		}
	}
	return false
}

// underWorkDir returns path relative to the working directory when it lies
// below it (the plugin directory of a config file in it, which the config
// makes absolute), else path: what the user wrote is what they read back.
func underWorkDir(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return rel
}
