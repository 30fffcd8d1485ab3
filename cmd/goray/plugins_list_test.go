package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

// TestPluginsListShowsPin: `goray plugins list` says whether each plugin's
// binary is pinned by sha256, in a column and in the JSON rows.
func TestPluginsListShowsPin(t *testing.T) {
	const pin = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	node := []byte("0123456789abcdef")
	rows := []pluginRow{
		pluginRowOf(node, &pb.PluginStatus{Kind: "transport", Name: "shm", State: "running", Sha256: pin}),
		pluginRowOf(node, &pb.PluginStatus{Kind: "storage", Name: "s3", State: "running"}),
	}
	var table bytes.Buffer
	if err := writePlugins(&table, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "PINNED") {
		t.Fatalf("table:\n%s", table.String())
	}
	if !strings.Contains(lines[1], "sha256:"+pin[:12]) || !strings.Contains(lines[2], " no ") {
		t.Errorf("PINNED cells wrong:\n%s", table.String())
	}
	var js bytes.Buffer
	if err := writeJSON(&js, map[string]any{"plugins": rows}); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Plugins []struct {
			Name   string `json:"name"`
			Pinned *bool  `json:"pinned"`
			SHA256 string `json:"sha256"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Plugins) != 2 || got.Plugins[0].Pinned == nil || !*got.Plugins[0].Pinned || got.Plugins[0].SHA256 != pin ||
		got.Plugins[1].Pinned == nil || *got.Plugins[1].Pinned || got.Plugins[1].SHA256 != "" {
		t.Errorf("JSON rows:\n%s", js.String())
	}
}
