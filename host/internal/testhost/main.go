// Command testhost runs a plugin Manager with the test plugin, prints
// "pid <plugin pid>" and then serves until killed. The host package's tests
// kill it with SIGKILL and check that the plugin does not outlive it.
//
// Usage: testhost <plugin_dir> <socket_dir>
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/host"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: testhost <plugin_dir> <socket_dir>")
		os.Exit(2)
	}
	src := fmt.Sprintf("plugin_dir = %q\nplugin \"transport\" \"test\" {\n  config {\n    greeting = \"hi\"\n  }\n}\n", os.Args[1])
	n, diags := config.Parse([]byte(src), "testhost.hcl")
	if diags.HasErrors() {
		fmt.Fprintln(os.Stderr, config.FormatDiagnostics(diags, n.Files(), 0, false))
		os.Exit(1)
	}
	m := host.New(host.Options{
		PluginDir: n.PluginDir,
		Blocks:    n.Plugins,
		Files:     n.Files(),
		SocketDir: os.Args[2],
		Logger:    hclog.New(&hclog.LoggerOptions{Name: "testhost", Output: os.Stderr, Level: hclog.Info}),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if diags := m.Start(ctx); diags.HasErrors() {
		fmt.Fprintln(os.Stderr, config.FormatDiagnostics(diags, n.Files(), 0, false))
		os.Exit(1)
	}
	fmt.Printf("pid %d\n", m.Plugins()[0].Pid)
	select {}
}
