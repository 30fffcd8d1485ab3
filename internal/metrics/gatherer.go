package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/goray-dev/goray/internal/auth"
)

// maxRemoteBytes bounds what one read of another process's metrics may
// return; remoteTimeout bounds its time.
const (
	maxRemoteBytes = 32 << 20
	remoteTimeout  = 3 * time.Second
)

// UnixGatherer gathers the metrics another process of the node serves on
// the unix socket path (the head's GCS process), with creds' token. It
// adds goray_gcs_up: 1 when the read succeeded, else 0 (a GCS restarting
// leaves a gap, never a failed scrape).
func UnixGatherer(path string, creds *auth.Credentials) prometheus.Gatherer {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		MaxIdleConns:       1,
		IdleConnTimeout:    time.Minute,
		DisableCompression: true,
	}
	return &unixGatherer{path: path, creds: creds, client: &http.Client{Transport: tr, Timeout: remoteTimeout}}
}

type unixGatherer struct {
	path   string
	creds  *auth.Credentials
	client *http.Client
}

func (g *unixGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.fetch()
	up := 1.0
	if err != nil {
		up, mfs = 0, nil
	}
	name, help, typ := Namespace+"_"+nameGCSUp, helpGCSUp, dto.MetricType_GAUGE
	mfs = append(mfs, &dto.MetricFamily{Name: &name, Help: &help, Type: &typ,
		Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: &up}}}})
	return mfs, nil
}

// fetch reads the process's metrics in Prometheus's protobuf format.
func (g *unixGatherer) fetch() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), remoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost"+Path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	g.creds.SetHTTPAuth(req)
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: %s", g.path, resp.Status)
	}
	dec := expfmt.NewDecoder(io.LimitReader(resp.Body, maxRemoteBytes), expfmt.ResponseFormat(resp.Header))
	var out []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("metrics of %s: %w", g.path, err)
		}
		out = append(out, mf)
	}
}
