package host

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/goray-dev/goray/sdk/plugin"
)

// maxCheckAPIVersion bounds the API versions Check and Launch offer: they
// accept whatever version a plugin speaks, up to this one.
const maxCheckAPIVersion = 32

// CheckReport is what Check finds out about a plugin binary.
type CheckReport struct {
	// Path is the binary checked.
	Path string
	// Kind, Name and Version are what the plugin reports about itself.
	Kind, Name, Version string
	// APIVersions are the versions of the kind's protocol it speaks.
	APIVersions []int
	// Schema describes its config block.
	Schema plugin.Schema
	// Healthy is the result of one health check; HealthError says why it
	// failed.
	Healthy     bool
	HealthError string
	// Duration is how long the whole check took.
	Duration time.Duration
}

// Check launches the plugin binary at path once — handshake, GetInfo,
// GetSchema, Health — and stops it. kind, when not empty, must be the
// plugin's kind (a mismatch is a *KindMismatchError). The plugin is not
// configured, so Health reports an unconfigured plugin. ctx bounds the
// whole check. This is what `goray plugins check PATH` runs.
func Check(ctx context.Context, path string, kind string) (*CheckReport, error) {
	begin := time.Now()
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("plugin check: %w", err)
	}
	versions := make([]int, maxCheckAPIVersion)
	for i := range versions {
		versions[i] = i + 1
	}
	p, err := launch(ctx, launchSpec{
		label:        fmt.Sprintf("%q", filepath.Base(abs)),
		path:         abs,
		versions:     versions,
		log:          hclog.NewNullLogger(),
		startTimeout: DefaultStartTimeout,
	})
	if err != nil {
		return nil, err
	}
	defer p.stop(ctx)
	info, err := p.info.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("plugin check of %s: %w", abs, err)
	}
	if kind != "" && info.Kind != kind {
		return nil, &KindMismatchError{Path: abs, Want: kind, Got: info.Kind}
	}
	schema, err := p.info.Schema(ctx)
	if err != nil {
		return nil, fmt.Errorf("plugin check of %s: %w", abs, err)
	}
	rep := &CheckReport{
		Path:        abs,
		Kind:        info.Kind,
		Name:        info.Name,
		Version:     info.Version,
		APIVersions: info.APIVersions,
		Schema:      schema,
		Healthy:     true,
	}
	if err := p.info.Health(ctx); err != nil {
		rep.Healthy = false
		rep.HealthError = err.Error()
	}
	rep.Duration = time.Since(begin)
	return rep, nil
}
