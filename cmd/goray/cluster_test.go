package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goray-dev/goray/host/node"
)

// deadPid is above the largest pid_max Linux allows, so never running.
const deadPid = 1 << 23

// makeSession creates root/name with a sockets dir and, when info is not
// nil, a node.json.
func makeSession(t *testing.T, root, name string, info *node.Info) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Join(dir, "sockets"), 0o755); err != nil {
		t.Fatal(err)
	}
	if info != nil {
		info.SessionDir = dir
		b, err := json.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "node.json"), string(b))
	}
	return dir
}

func setLatest(t *testing.T, root, dir string) {
	t.Helper()
	if err := os.Symlink(dir, filepath.Join(root, "session_latest")); err != nil {
		t.Fatal(err)
	}
}

func TestSessions(t *testing.T) {
	root := t.TempDir()
	live := makeSession(t, root, "session_2024-01-01_00-00-02_1", &node.Info{NodeID: "aa", Head: true, Pid: os.Getpid(), GCSAddress: "127.0.0.1:1"})
	dead := makeSession(t, root, "session_2024-01-01_00-00-01_2", &node.Info{NodeID: "bb", Head: true, Pid: deadPid})
	empty := makeSession(t, root, "session_2024-01-01_00-00-03_3", nil)
	reused := makeSession(t, root, "session_2024-01-01_00-00-00_4", &node.Info{NodeID: "cc", Pid: os.Getpid()})
	// node.json written long before this process started: the pid was reused.
	old := time.Unix(1000, 0)
	if err := os.Chtimes(filepath.Join(reused, "node.json"), old, old); err != nil {
		t.Fatal(err)
	}
	setLatest(t, root, live)

	ss, err := procFS{"/proc"}.sessions(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		dir     string
		hasInfo bool
		running bool
	}{{reused, true, false}, {dead, true, false}, {live, true, true}, {empty, false, false}}
	if len(ss) != len(want) {
		t.Fatalf("sessions = %+v, want %d (session_latest is not one)", ss, len(want))
	}
	for i, w := range want {
		if ss[i].Dir != w.dir || (ss[i].Info != nil) != w.hasInfo || ss[i].Running != w.running {
			t.Errorf("session %d = {%s info:%v running:%v}, want {%s info:%v running:%v}",
				i, ss[i].Dir, ss[i].Info != nil, ss[i].Running, w.dir, w.hasInfo, w.running)
		}
	}

	none, err := procFS{"/proc"}.sessions(filepath.Join(root, "missing"))
	if err != nil || len(none) != 0 {
		t.Errorf("sessions(missing root) = %v, %v; want none", none, err)
	}
}

func TestResolveAddress(t *testing.T) {
	self := os.Getpid()
	tests := []struct {
		name    string
		flag    string
		env     string
		setup   func(t *testing.T, root string)
		want    string
		wantErr error
	}{
		{name: "flag wins", flag: "10.0.0.1:6380", env: "10.0.0.2:6380", want: "10.0.0.1:6380"},
		{name: "env next", env: " 10.0.0.2:6380 ", want: "10.0.0.2:6380",
			setup: func(t *testing.T, root string) {
				makeSession(t, root, "session_a", &node.Info{NodeID: "aa", Head: true, Pid: self, GCSAddress: "127.0.0.1:7000"})
			}},
		{name: "running head under temp dir",
			setup: func(t *testing.T, root string) {
				makeSession(t, root, "session_a", &node.Info{NodeID: "aa", Head: true, Pid: self, GCSAddress: "127.0.0.1:7000"})
			},
			want: "127.0.0.1:7000"},
		{name: "session_latest preferred",
			setup: func(t *testing.T, root string) {
				a := makeSession(t, root, "session_a", &node.Info{NodeID: "aa", Head: true, Pid: self, GCSAddress: "127.0.0.1:7000"})
				makeSession(t, root, "session_b", &node.Info{NodeID: "bb", Head: true, Pid: self, GCSAddress: "127.0.0.1:7001"})
				setLatest(t, root, a)
			},
			want: "127.0.0.1:7000"},
		{name: "session_latest of a failed start is skipped",
			setup: func(t *testing.T, root string) {
				makeSession(t, root, "session_a", &node.Info{NodeID: "aa", Head: true, Pid: self, GCSAddress: "127.0.0.1:7000"})
				failed := makeSession(t, root, "session_b", nil)
				setLatest(t, root, failed)
			},
			want: "127.0.0.1:7000"},
		{name: "dead head, running worker node: its cluster",
			setup: func(t *testing.T, root string) {
				makeSession(t, root, "session_a", &node.Info{NodeID: "aa", Head: true, Pid: deadPid, GCSAddress: "127.0.0.1:7000"})
				makeSession(t, root, "session_b", &node.Info{NodeID: "bb", Head: false, Pid: self, GCSAddress: "127.0.0.1:7001"})
			},
			want: "127.0.0.1:7001"},
		{name: "dead nodes only",
			setup: func(t *testing.T, root string) {
				makeSession(t, root, "session_a", &node.Info{NodeID: "aa", Head: true, Pid: deadPid, GCSAddress: "127.0.0.1:7000"})
				makeSession(t, root, "session_b", &node.Info{NodeID: "bb", Head: false, Pid: deadPid, GCSAddress: "127.0.0.1:7000"})
			},
			wantErr: ErrNoCluster},
		{name: "nothing", wantErr: ErrNoCluster},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, root)
			}
			a := &app{getenv: func(k string) string {
				if k == envAddress {
					return tt.env
				}
				return ""
			}, procRoot: "/proc"}
			got, err := a.resolveAddress(tt.flag, root)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("resolveAddress error = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("resolveAddress = %q, want %q", got, tt.want)
			}
		})
	}
}
