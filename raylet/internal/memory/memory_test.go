package memory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPick(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	task := func(name, owner string, retriable bool, s int) Candidate {
		return Candidate{Key: name, Owner: owner, Retriable: retriable, Granted: at(s)}
	}
	actor := func(name, owner string, retriable bool, s int) Candidate {
		c := task(name, owner, retriable, s)
		c.Actor = true
		return c
	}
	tests := []struct {
		name   string
		cs     []Candidate
		want   string // Key of the chosen one; "" for none
		whyHas string
	}{
		{name: "nothing to kill", cs: nil, want: ""},
		{name: "the only task", cs: []Candidate{task("a", "o1", true, 1)}, want: "a", whyHas: "most recently started retriable task"},
		{name: "newest retriable task", cs: []Candidate{task("old", "o1", true, 1), task("new", "o1", true, 5), task("mid", "o1", true, 3)}, want: "new"},
		{
			name: "retriable before a newer task that cannot be retried",
			cs:   []Candidate{task("retriable", "o1", true, 1), task("once", "o2", false, 9)},
			want: "retriable",
		},
		{
			name:   "a task that cannot be retried before any actor",
			cs:     []Candidate{actor("restartable", "o1", true, 9), task("once", "o2", false, 1), actor("plain", "o1", false, 10)},
			want:   "once",
			whyHas: "cannot be retried",
		},
		{
			name:   "actors only when no task is left, restartable first",
			cs:     []Candidate{actor("plain", "o1", false, 9), actor("restartable", "o1", true, 1)},
			want:   "restartable",
			whyHas: "no task was left",
		},
		{name: "an actor that cannot restart last", cs: []Candidate{actor("plain", "o1", false, 9)}, want: "plain", whyHas: "nothing else"},
		{
			name: "the largest owner group first, its newest task",
			cs: []Candidate{
				task("o1-a", "o1", true, 1), task("o1-b", "o1", true, 2), task("o1-c", "o1", true, 3),
				task("o2-a", "o2", true, 10),
			},
			want:   "o1-c",
			whyHas: "owner with the most such tasks",
		},
		{
			name: "groups of one size: the group whose first lease is newest",
			cs: []Candidate{
				task("o1-a", "o1", true, 1), task("o1-b", "o1", true, 8),
				task("o2-a", "o2", true, 4), task("o2-b", "o2", true, 5),
			},
			want: "o2-b",
		},
		{
			name: "tasks that cannot be retried form one group whatever their owner",
			cs: []Candidate{
				task("x1", "o1", false, 1), task("x2", "o2", false, 3), task("x3", "o3", false, 2),
			},
			want: "x2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i, why, ok := Pick(tc.cs)
			if tc.want == "" {
				if ok {
					t.Fatalf("Pick chose %v, want nothing", tc.cs[i].Key)
				}
				return
			}
			if !ok {
				t.Fatalf("Pick chose nothing, want %s", tc.want)
			}
			if got := tc.cs[i].Key; got != tc.want {
				t.Fatalf("Pick chose %v, want %s (why: %s)", got, tc.want, why)
			}
			if !strings.Contains(why, tc.whyHas) {
				t.Fatalf("why = %q, want it to contain %q", why, tc.whyHas)
			}
		})
	}
}

// layout writes files under a fake root.
func layout(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\nBuffers:          100 kB\n"

func TestSystemReader(t *testing.T) {
	const hostTotal = 16000000 * 1024
	tests := []struct {
		name       string
		files      map[string]string
		used       int64
		total      int64
		sourceHas  string
		wantErrHas string
	}{
		{
			name:  "host: MemTotal - MemAvailable",
			files: map[string]string{"proc/meminfo": meminfo},
			used:  12000000 * 1024, total: hostTotal, sourceHas: "/proc/meminfo",
		},
		{
			name: "cgroup v2 without a limit: the host",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "0::/job\n",
				"sys/fs/cgroup/job/memory.max": "max\n", "sys/fs/cgroup/job/memory.current": "1000\n",
			},
			used: 12000000 * 1024, total: hostTotal, sourceHas: "/proc/meminfo",
		},
		{
			name: "cgroup v2 with a limit, less inactive files",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "0::/job\n",
				"sys/fs/cgroup/job/memory.max":     "2147483648\n",
				"sys/fs/cgroup/job/memory.current": "1073741824\n",
				"sys/fs/cgroup/job/memory.stat":    "anon 900000000\nfile 100\ninactive_file 73741824\nactive_file 5\n",
			},
			used: 1000000000, total: 2147483648, sourceHas: "cgroup v2 /sys/fs/cgroup/job",
		},
		{
			name: "cgroup v2: a parent's tighter limit applies",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "0::/a/b\n",
				"sys/fs/cgroup/a/memory.max":       "1000000\n",
				"sys/fs/cgroup/a/memory.current":   "600000\n",
				"sys/fs/cgroup/a/b/memory.max":     "max\n",
				"sys/fs/cgroup/a/b/memory.current": "500000\n",
			},
			used: 600000, total: 1000000, sourceHas: "cgroup v2 /sys/fs/cgroup/a",
		},
		{
			name: "cgroup v2 inside a namespace: the mount is the cgroup",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n",
				"sys/fs/cgroup/memory.max": "4000\n", "sys/fs/cgroup/memory.current": "3000\n",
			},
			used: 3000, total: 4000, sourceHas: "cgroup v2 /sys/fs/cgroup",
		},
		{
			name: "cgroup v1 without a limit: the host",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/process_api/x\n0::/\n",
				"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "9223372036854771712\n",
				"sys/fs/cgroup/memory/process_api/x/memory.usage_in_bytes": "18571264\n",
			},
			used: 12000000 * 1024, total: hostTotal, sourceHas: "/proc/meminfo",
		},
		{
			name: "cgroup v1 with a limit",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "9:cpu,cpuacct:/x\n4:memory:/docker/x\n0::/\n",
				"sys/fs/cgroup/memory/docker/x/memory.limit_in_bytes": "8000\n",
				"sys/fs/cgroup/memory/docker/x/memory.usage_in_bytes": "7000\n",
				"sys/fs/cgroup/memory/docker/x/memory.stat":           "cache 10\ntotal_inactive_file 1000\n",
			},
			used: 6000, total: 8000, sourceHas: "cgroup v1 /sys/fs/cgroup/memory/docker/x",
		},
		{
			name: "a cgroup limit above the host's memory: the host",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "0::/job\n",
				"sys/fs/cgroup/job/memory.max": "99999999999999\n", "sys/fs/cgroup/job/memory.current": "1000\n",
			},
			used: 12000000 * 1024, total: hostTotal, sourceHas: "/proc/meminfo",
		},
		{
			name:       "no meminfo",
			files:      map[string]string{"proc/self/cgroup": "0::/\n"},
			wantErrHas: "reading memory use",
		},
		{
			name:       "meminfo without MemAvailable",
			files:      map[string]string{"proc/meminfo": "MemTotal: 100 kB\n"},
			wantErrHas: "no MemTotal or MemAvailable",
		},
		{
			name:       "garbage in meminfo",
			files:      map[string]string{"proc/meminfo": "MemTotal: lots kB\nMemAvailable: 1 kB\n"},
			wantErrHas: `bad MemTotal value "lots"`,
		},
		{
			name: "garbage in a limited cgroup's usage",
			files: map[string]string{
				"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n",
				"sys/fs/cgroup/memory.max": "4000\n", "sys/fs/cgroup/memory.current": "x\n",
			},
			wantErrHas: "not a byte count",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := SystemReader{Root: layout(t, tc.files)}.Read()
			if tc.wantErrHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrHas) {
					t.Fatalf("Read = %+v, %v; want an error containing %q", u, err, tc.wantErrHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.Used != tc.used || u.Total != tc.total || !strings.Contains(u.Source, tc.sourceHas) {
				t.Fatalf("Read = %+v, want used %d total %d source containing %q", u, tc.used, tc.total, tc.sourceHas)
			}
		})
	}
}

// TestSystemReaderHere reads this machine: a sane fraction.
func TestSystemReaderHere(t *testing.T) {
	u, err := SystemReader{}.Read()
	if err != nil {
		t.Fatal(err)
	}
	if f := u.Fraction(); u.Total <= 0 || f <= 0 || f > 1 {
		t.Fatalf("reading of this machine: %+v (fraction %v)", u, f)
	}
}
