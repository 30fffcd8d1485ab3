// Command testplugin is a goray plugin for the host package's tests. Its
// "kind API" is a tiny Echo service; its behaviour is steered by
// environment variables:
//
//	GORAY_TESTPLUGIN_KIND          kind to report (default "transport")
//	GORAY_TESTPLUGIN_VERSIONS      API versions, e.g. "1,2" (the default)
//	GORAY_TESTPLUGIN_EXIT_AT_START exit with status 3 before serving
//	GORAY_TESTPLUGIN_CRASH_AFTER   exit with status 2 at that health check
//	GORAY_TESTPLUGIN_CTL           a directory; while it holds a file
//	                               "fail-health", health checks fail
//
// Echo requests: "crash" exits the process, "hang" blocks until the call is
// cancelled, "config" returns the decoded config as JSON, "args" its
// command-line arguments as JSON, "loglevel" the log level the host gave it
// (plugin.EnvLogLevel); anything else is
// echoed back as "v<api version> <greeting>: <input>".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/goray-dev/goray/sdk/plugin"
)

var (
	log = hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Debug})

	mu     sync.Mutex
	config map[string]any

	healthChecks atomic.Int64
)

func main() {
	if os.Getenv("GORAY_TESTPLUGIN_EXIT_AT_START") != "" {
		fmt.Fprintln(os.Stderr, "testplugin: told to exit at start")
		os.Exit(3)
	}
	kind := os.Getenv("GORAY_TESTPLUGIN_KIND")
	if kind == "" {
		kind = plugin.KindTransport
	}
	vs := os.Getenv("GORAY_TESTPLUGIN_VERSIONS")
	if vs == "" {
		vs = "1,2"
	}
	versions := map[int]func(*grpc.Server){}
	for _, f := range strings.Split(vs, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "testplugin: bad GORAY_TESTPLUGIN_VERSIONS %q\n", vs)
			os.Exit(1)
		}
		versions[v] = func(s *grpc.Server) { s.RegisterService(&echoDesc, &echo{version: v}) }
	}
	crashAfter, _ := strconv.Atoi(os.Getenv("GORAY_TESTPLUGIN_CRASH_AFTER"))
	ctl := os.Getenv("GORAY_TESTPLUGIN_CTL")

	plugin.Serve(plugin.ServeConfig{
		Kind:        kind,
		Name:        "test",
		Version:     "0.1.0",
		APIVersions: versions,
		Schema: plugin.Schema{
			Attributes: map[string]plugin.Attribute{
				"greeting": {Type: plugin.TypeString, Required: true, Description: "what Echo says"},
				"size":     {Type: plugin.TypeSize, Optional: true},
				"timeout":  {Type: plugin.TypeDuration, Default: "5s"},
				"tags":     {Type: plugin.TypeListString},
				"labels":   {Type: plugin.TypeMapString},
				"ratio":    {Type: plugin.TypeNumber},
				"verbose":  {Type: plugin.TypeBool},
				"secret":   {Type: plugin.TypeString, Sensitive: true},
			},
			Blocks: map[string]plugin.BlockSchema{
				"endpoint": {Repeated: true, Schema: plugin.Schema{Attributes: map[string]plugin.Attribute{
					"address": {Type: plugin.TypeString, Required: true},
					"weight":  {Type: plugin.TypeNumber},
				}}},
			},
		},
		Configure: func(_ context.Context, cfg map[string]any) error {
			if cfg["greeting"] == "reject-me" {
				return errors.New(`greeting "reject-me" is not allowed`)
			}
			mu.Lock()
			config = cfg
			mu.Unlock()
			log.Info("testplugin configured", "greeting", cfg["greeting"])
			return nil
		},
		Health: func(context.Context) error {
			n := healthChecks.Add(1)
			if crashAfter > 0 && n >= int64(crashAfter) {
				log.Error("testplugin crashing as told", "health_checks", n)
				os.Exit(2)
			}
			if ctl != "" {
				if _, err := os.Stat(filepath.Join(ctl, "fail-health")); err == nil {
					return errors.New("told to fail")
				}
			}
			return nil
		},
		Logger: log,
	})
}

type echoServer interface {
	Echo(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

type echo struct{ version int }

func (e *echo) Echo(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	switch in.GetValue() {
	case "crash":
		os.Exit(2)
	case "hang":
		<-ctx.Done()
		return nil, ctx.Err()
	case "config":
		mu.Lock()
		b, err := json.Marshal(config)
		mu.Unlock()
		if err != nil {
			return nil, err
		}
		return wrapperspb.String(string(b)), nil
	case "args":
		b, err := json.Marshal(os.Args[1:])
		if err != nil {
			return nil, err
		}
		return wrapperspb.String(string(b)), nil
	case "loglevel":
		return wrapperspb.String(os.Getenv(plugin.EnvLogLevel)), nil
	}
	mu.Lock()
	greeting, _ := config["greeting"].(string)
	mu.Unlock()
	return wrapperspb.String(fmt.Sprintf("v%d %s: %s", e.version, greeting, in.GetValue())), nil
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "goraytest.Echo",
	HandlerType: (*echoServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			return srv.(echoServer).Echo(ctx, in)
		},
	}},
	Metadata: "testplugin",
}
