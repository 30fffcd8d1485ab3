package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	pb "github.com/goray-dev/goray/internal/proto/gorayv1"
)

func TestStatusShowsMemoryKills(t *testing.T) {
	node := []byte{0xab, 0xcd, 0xef, 0x01, 2, 3, 4, 5}
	kill := &pb.MemoryKill{
		NodeId: node, NodeName: "n1", NodeIp: "127.0.0.1", WorkerId: []byte{0x12, 0x34, 0x56, 0x78, 9}, Pid: 4242,
		Function: "main.hog", UsedBytes: 15 << 30, TotalBytes: 16 << 30, Threshold: 0.9, Source: "/proc/meminfo",
		TimeMs: time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local).UnixMilli(), Why: "it was the most recently started retriable task",
	}
	views := []*pb.NodeView{
		{Info: &pb.NodeInfo{NodeId: node, State: "ALIVE", IsHead: true},
			Memory: &pb.MemoryMonitorStats{Threshold: 0.9, RefreshMs: 250, Kills: 2, LastKill: kill, UsedBytes: 2 << 30, TotalBytes: 16 << 30, Source: "/proc/meminfo"}},
		{Info: &pb.NodeInfo{NodeId: []byte{0x11, 0x22, 0x33, 0x44}, State: "ALIVE"},
			Memory: &pb.MemoryMonitorStats{Threshold: 0.95, Error: "reading memory use: no /proc/meminfo"}},
		{Info: &pb.NodeInfo{NodeId: []byte{0x55, 0x66, 0x77, 0x88}, State: "ALIVE"},
			Memory: &pb.MemoryMonitorStats{Threshold: 0.95, UsedBytes: 1, TotalBytes: 2}},
	}
	r := buildStatus("127.0.0.1:6379", views, nil, nil)
	var out bytes.Buffer
	if err := writeStatus(&out, r); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"Memory monitor on abcdef01: 2 workers killed for memory (threshold 0.900; now 2.0 GiB of 16 GiB)\n",
		"  last at 2026-01-02 03:04:05: main.hog (worker 12345678, pid 4242) with 15 GiB of 16 GiB used\n",
		"Memory monitor on 11223344: CANNOT READ MEMORY: reading memory use: no /proc/meminfo\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("goray status does not say %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "Memory monitor on 55667788") {
		t.Errorf("a node whose monitor killed nothing is shown:\n%s", text)
	}

	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Nodes []struct {
			Memory *memoryStatus `json:"memory_monitor"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	m := back.Nodes[0].Memory
	if m == nil || m.Kills != 2 || m.LastKill == nil || m.LastKill.Function != "main.hog" || m.LastKill.Pid != 4242 ||
		!strings.Contains(m.LastKill.Reason, "15 GiB of 16 GiB (0.938), above the usage threshold 0.900") {
		t.Fatalf("goray status --json memory_monitor: %s", b)
	}
}
