package ray

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/autoscaler"
	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// requestsInKV reads the explicit resource request from the GCS's KV
// store, as the autoscaler reads it.
func requestsInKV(t *testing.T, ctx context.Context) (reqs []autoscaler.Request, raw string) {
	t.Helper()
	cw, err := current()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := cw.GCS().KVGet(ctx, &pb.KVGetRequest{Ns: autoscaler.StatusNamespace, Key: autoscaler.RequestsKey})
	if err != nil {
		t.Fatalf("KVGet %s/%s: %v", autoscaler.StatusNamespace, autoscaler.RequestsKey, err)
	}
	if !rep.GetFound() {
		t.Fatalf("no %s/%s in the KV store", autoscaler.StatusNamespace, autoscaler.RequestsKey)
	}
	if err := json.Unmarshal(rep.GetValue(), &reqs); err != nil {
		t.Fatalf("%s/%s holds %q, not a JSON array of autoscaler.Request: %v", autoscaler.StatusNamespace, autoscaler.RequestsKey, rep.GetValue(), err)
	}
	return reqs, string(rep.GetValue())
}

func requestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	t.Cleanup(func() { _ = RequestResources(context.Background()) })
	return ctx
}

// TestRequestResources: on an embedded node (no autoscaler) the request is
// stored in the KV store where the autoscaler reads it, identical shapes
// merged; a second call replaces it and a call with nothing clears it.
func TestRequestResources(t *testing.T) {
	ctx := requestCtx(t)
	err := RequestResources(ctx, WithCPUs(3),
		WithBundles(Bundle{"GPU": 1, "CPU": 2}, Bundle{"CPU": 1, "memory": 0}, Bundle{"CPU": 2, "GPU": 1}),
		WithBundles(Bundle{"memory": 2 << 30}), WithCPUs(0))
	if err != nil {
		t.Fatalf("RequestResources: %v", err)
	}
	got, raw := requestsInKV(t, ctx)
	want := []autoscaler.Request{
		{Resources: map[string]float64{"CPU": 1}, Count: 4},
		{Resources: map[string]float64{"CPU": 2, "GPU": 1}, Count: 2},
		{Resources: map[string]float64{"memory": 2 << 30}, Count: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("KV holds %s, want %+v (shapes merged in the order asked, zeros left out)", raw, want)
	}

	if err := RequestResources(ctx, WithBundles(Bundle{"TPU": 4})); err != nil {
		t.Fatalf("second RequestResources: %v", err)
	}
	want = []autoscaler.Request{{Resources: map[string]float64{"TPU": 4}, Count: 1}}
	if got, raw := requestsInKV(t, ctx); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a second call the KV holds %s, want only %+v (it replaces the first)", raw, want)
	}

	if err := RequestResources(ctx); err != nil {
		t.Fatalf("RequestResources(ctx) to clear: %v", err)
	}
	if got, raw := requestsInKV(t, ctx); raw != "[]" || len(got) != 0 {
		t.Fatalf("after clearing the KV holds %q, want []", raw)
	}
}

// TestRequestResourcesBadArguments: a bad argument is a
// *RequestResourcesError naming the option and the problem, and the
// standing request is left as it was.
func TestRequestResourcesBadArguments(t *testing.T) {
	ctx := requestCtx(t)
	if err := RequestResources(ctx, WithCPUs(2)); err != nil {
		t.Fatal(err)
	}
	_, before := requestsInKV(t, ctx)
	tests := []struct {
		name   string
		opts   []RequestOption
		option int
		opt    string
		want   string
	}{
		{"nil option", []RequestOption{WithCPUs(1), nil}, 1, "", "option 1: the option is nil; pass WithCPUs or WithBundles"},
		{"negative CPUs", []RequestOption{WithCPUs(-1)}, 0, "WithCPUs", "option 0 (WithCPUs): -1 CPUs: want a whole number from 0 to 2147483647"},
		{"NaN CPUs", []RequestOption{WithCPUs(math.NaN())}, 0, "WithCPUs", "NaN CPUs: want a whole number"},
		{"infinite CPUs", []RequestOption{WithCPUs(math.Inf(1))}, 0, "WithCPUs", "+Inf CPUs: want a whole number"},
		{"fractional CPUs", []RequestOption{WithCPUs(2.5)}, 0, "WithCPUs", "2.5 CPUs: want a whole number"},
		{"too many CPUs", []RequestOption{WithCPUs(1e12)}, 0, "WithCPUs", "1e+12 CPUs: want a whole number from 0 to 2147483647"},
		{"empty bundle", []RequestOption{WithCPUs(1), WithBundles(Bundle{"CPU": 1}, Bundle{})}, 1, "WithBundles",
			"option 1 (WithBundles): bundle 1 is empty; a bundle asks for some resource"},
		{"only zeros", []RequestOption{WithBundles(Bundle{"CPU": 0})}, 0, "WithBundles", "bundle 0 is empty"},
		{"negative amount", []RequestOption{WithBundles(Bundle{"CPU": -1})}, 0, "WithBundles", `bundle 0 {CPU: -1}: resource "CPU": amount must be a finite number >= 0`},
		{"NaN amount", []RequestOption{WithBundles(Bundle{"GPU": math.NaN()})}, 0, "WithBundles", `bundle 0 {GPU: NaN}: resource "GPU": amount must be a finite number >= 0`},
		{"group resource", []RequestOption{WithBundles(Bundle{"CPU_group_0_abc": 1})}, 0, "WithBundles", `bundle 0: "CPU_group_0_abc" is a placement group resource`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RequestResources(ctx, tt.opts...)
			var re *RequestResourcesError
			if !errors.As(err, &re) {
				t.Fatalf("RequestResources = %v, want a *RequestResourcesError", err)
			}
			if re.Option != tt.option || re.Name != tt.opt || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "goray: RequestResources: ") {
				t.Errorf("error %q (option %d %q), want option %d %q and a message containing %q", err, re.Option, re.Name, tt.option, tt.opt, tt.want)
			}
			if _, after := requestsInKV(t, ctx); after != before {
				t.Errorf("after a bad call the KV holds %s, want the standing request %s", after, before)
			}
		})
	}
}
