package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// envMap is a getenv over a fixed set of variables.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestGCSParse(t *testing.T) {
	tests := []struct {
		name string
		src  string
		file string // default goray.hcl
		want GCS
	}{
		{
			name: "no gcs block",
			src:  "head {}\n",
			want: GCS{ReconnectTimeout: 60 * time.Second},
		},
		{
			name: "empty gcs block",
			src:  "head {}\ngcs {}\n",
			want: GCS{ReconnectTimeout: 60 * time.Second},
		},
		{
			name: "all fields",
			src: `head {}
gcs {
  storage           = "redis"
  reconnect_timeout = "2m"
  redis {
    address  = "10.0.0.5:6379"
    username = "goray"
    password = "pw"
    db       = 3
    prefix   = "prod"
  }
}
`,
			want: GCS{Storage: GCSStorageRedis, ReconnectTimeout: 2 * time.Minute,
				Redis: Redis{Address: "10.0.0.5:6379", Username: "goray", Password: "pw", DB: 3, Prefix: "prod"}},
		},
		{
			name: "bolt",
			src:  "head {}\ngcs {\n  storage = \"bolt\"\n}\n",
			want: GCS{Storage: GCSStorageBolt, ReconnectTimeout: 60 * time.Second},
		},
		{
			name: "memory",
			src:  "head {}\ngcs {\n  storage = \"memory\"\n}\n",
			want: GCS{Storage: GCSStorageMemory, ReconnectTimeout: 60 * time.Second},
		},
		{
			name: "reconnect_timeout on a worker node",
			src:  "address = \"10.0.0.1:6380\"\ngcs {\n  reconnect_timeout = \"5s\"\n}\n",
			want: GCS{ReconnectTimeout: 5 * time.Second},
		},
		{
			name: "JSON",
			file: "goray.json",
			src:  `{"head": {}, "gcs": {"storage": "redis", "redis": {"address": "redis.internal:6380", "db": 1}}}`,
			want: GCS{Storage: GCSStorageRedis, ReconnectTimeout: 60 * time.Second, Redis: Redis{Address: "redis.internal:6380", DB: 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "goray.hcl"
			}
			n, diags := Parse([]byte(tc.src), file)
			if len(diags) != 0 {
				t.Fatalf("Parse: %v", diags)
			}
			if vd := n.Validate(); len(vd) != 0 {
				t.Fatalf("Validate: %v", vd)
			}
			if !reflect.DeepEqual(n.GCS, tc.want) {
				t.Errorf("GCS = %+v, want %+v", n.GCS, tc.want)
			}
		})
	}
}

// gcsDiagCase is one diagnostic expected from a config: its severity,
// summary, line (0: no source range) and text in its detail.
type gcsDiagCase struct {
	name     string
	src      string
	severity hcl.DiagnosticSeverity
	summary  string
	line     int
	want     []string
	notWant  []string
}

// checkGCSDiag finds the diagnostic tc describes in diags and checks it.
func checkGCSDiag(t *testing.T, diags hcl.Diagnostics, tc gcsDiagCase) {
	t.Helper()
	var found *hcl.Diagnostic
	for _, d := range diags {
		if d.Severity != tc.severity || d.Summary != tc.summary {
			continue
		}
		if (tc.line == 0 && d.Subject == nil) || (d.Subject != nil && d.Subject.Start.Line == tc.line) {
			found = d
			break
		}
	}
	if found == nil {
		t.Fatalf("no %v %q at line %d; got:\n%s", tc.severity, tc.summary, tc.line, FormatDiagnostics(diags, nil, 0, false))
	}
	for _, w := range tc.want {
		if !strings.Contains(found.Detail, w) {
			t.Errorf("detail %q does not contain %q", found.Detail, w)
		}
	}
	for _, w := range tc.notWant {
		if strings.Contains(found.Detail, w) {
			t.Errorf("detail %q contains %q", found.Detail, w)
		}
	}
}

func TestGCSDecodeErrors(t *testing.T) {
	tests := []gcsDiagCase{
		{
			name: "storage is not a string", src: "head {}\ngcs {\n  storage = 3\n}\n",
			summary: "Incorrect attribute value type", line: 3, want: []string{`"storage"`, "a string is required"},
		},
		{
			name: "reconnect_timeout is not a duration", src: "head {}\ngcs {\n  reconnect_timeout = \"soon\"\n}\n",
			summary: "Invalid duration", line: 3, want: []string{`"soon"`, `"30s"`},
		},
		{
			name: "db is not a whole number", src: "head {}\ngcs {\n  redis {\n    db = 1.5\n  }\n}\n",
			summary: "Invalid value", line: 4, want: []string{"whole number"},
		},
		{
			name: "misspelt argument", src: "head {}\ngcs {\n  redis {\n    adress = \"h:1\"\n  }\n}\n",
			summary: "Unsupported argument", line: 4, want: []string{`Did you mean "address"?`},
		},
		{
			name: "misspelt block", src: "head {}\ngcs {\n  reddis {}\n}\n",
			summary: "Unsupported block type", line: 3, want: []string{`Did you mean "redis"?`},
		},
		{
			name: "duplicate redis block", src: "head {}\ngcs {\n  redis {}\n  redis {}\n}\n",
			summary: "Duplicate redis block", line: 4, want: []string{"goray.hcl:3"},
		},
		{
			name: "duplicate gcs block", src: "gcs {}\ngcs {}\n",
			summary: "Duplicate gcs block", line: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.severity = hcl.DiagError
			_, diags := Parse([]byte(tc.src), "goray.hcl")
			checkGCSDiag(t, diags, tc)
		})
	}
}

func TestGCSValidate(t *testing.T) {
	const head = "head {}\n"
	const worker = "address = \"10.0.0.1:6380\"\n"
	redisWith := func(attrs string) string {
		return head + "gcs {\n  storage = \"redis\"\n  redis {\n" + attrs + "  }\n}\n"
	}
	tests := []gcsDiagCase{
		{
			name: "unknown storage with suggestion", src: head + "gcs {\n  storage = \"rediss\"\n}\n",
			severity: hcl.DiagError, summary: "Unknown GCS storage", line: 3,
			want: []string{`"rediss"`, `"bolt"`, `"redis"`, `"memory"`, `Did you mean "redis"?`},
		},
		{
			name: "unknown storage without suggestion", src: head + "gcs {\n  storage = \"etcd\"\n}\n",
			severity: hcl.DiagError, summary: "Unknown GCS storage", line: 3,
			want: []string{`"bolt"`, `"redis"`, `"memory"`}, notWant: []string{"Did you mean"},
		},
		{
			name: "redis without an address", src: head + "gcs {\n  storage = \"redis\"\n}\n",
			severity: hcl.DiagError, summary: "Missing Redis address", line: 3,
			want: []string{`redis { address = "host:port" }`, "$GORAY_GCS_REDIS_ADDRESS"},
		},
		{
			name: "redis block without an address", src: redisWith("    db = 1\n"),
			severity: hcl.DiagError, summary: "Missing Redis address", line: 3,
		},
		{
			name: "address without a port", src: redisWith("    address = \"10.0.0.5\"\n"),
			severity: hcl.DiagError, summary: "Invalid Redis address", line: 5, want: []string{`"10.0.0.5"`, "host:port"},
		},
		{
			name: "address with port 0", src: redisWith("    address = \"10.0.0.5:0\"\n"),
			severity: hcl.DiagError, summary: "Invalid Redis address", line: 5, want: []string{"1 to 65535"},
		},
		{
			name: "address port out of range", src: redisWith("    address = \"10.0.0.5:70000\"\n"),
			severity: hcl.DiagError, summary: "Invalid Redis address", line: 5, want: []string{"1 to 65535"},
		},
		{
			name: "address without a host", src: redisWith("    address = \":6379\"\n"),
			severity: hcl.DiagError, summary: "Invalid Redis address", line: 5, want: []string{"host"},
		},
		{
			name: "address given as a URL", src: redisWith("    address = \"redis://u:hunter2@10.0.0.5:6379\"\n"),
			severity: hcl.DiagError, summary: "Invalid Redis address", line: 5,
			want: []string{"not a URL", "$GORAY_GCS_REDIS_PASSWORD"}, notWant: []string{"hunter2", "redis://"},
		},
		{
			name: "bad address in an ignored redis block", src: head + "gcs {\n  redis {\n    address = \"nope\"\n  }\n}\n",
			severity: hcl.DiagError, summary: "Invalid Redis address", line: 4,
		},
		{
			name: "negative db", src: redisWith("    address = \"10.0.0.5:6379\"\n    db = -1\n"),
			severity: hcl.DiagError, summary: "Invalid value", line: 6, want: []string{"gcs.redis.db", "-1"},
		},
		{
			name: "prefix with whitespace", src: redisWith("    address = \"10.0.0.5:6379\"\n    prefix = \"my cluster\"\n"),
			severity: hcl.DiagError, summary: "Invalid Redis prefix", line: 6, want: []string{`"my cluster"`, "whitespace"},
		},
		{
			name: "prefix with a tab", src: redisWith("    address = \"10.0.0.5:6379\"\n    prefix = \"a\\tb\"\n"),
			severity: hcl.DiagError, summary: "Invalid Redis prefix", line: 6,
		},
		{
			name: "zero reconnect_timeout", src: head + "gcs {\n  reconnect_timeout = \"0s\"\n}\n",
			severity: hcl.DiagError, summary: "Invalid duration", line: 3, want: []string{"gcs.reconnect_timeout", "positive"},
		},
		{
			name: "negative reconnect_timeout", src: worker + "gcs {\n  reconnect_timeout = \"-5s\"\n}\n",
			severity: hcl.DiagError, summary: "Invalid duration", line: 3, want: []string{"-5s"},
		},
		{
			name: "redis block with storage bolt", src: head + "gcs {\n  storage = \"bolt\"\n  redis {\n    address = \"10.0.0.5:6379\"\n  }\n}\n",
			severity: hcl.DiagWarning, summary: "Redis settings are ignored", line: 4, want: []string{`gcs.storage is "bolt"`, `storage = "redis"`},
		},
		{
			name: "redis block with the default storage", src: head + "gcs {\n  redis {\n    address = \"10.0.0.5:6379\"\n  }\n}\n",
			severity: hcl.DiagWarning, summary: "Redis settings are ignored", line: 3, want: []string{"gcs.storage is not set"},
		},
		{
			name: "storage on a worker node", src: worker + "gcs {\n  storage = \"bolt\"\n}\n",
			severity: hcl.DiagWarning, summary: "GCS storage on a node that is not the head", line: 3, want: []string{"only used by the head"},
		},
		{
			name: "redis on a worker node", src: worker + "gcs {\n  redis {\n    address = \"10.0.0.5:6379\"\n  }\n}\n",
			severity: hcl.DiagWarning, summary: "Redis settings on a node that is not the head", line: 3, want: []string{"only used by the head"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatalf("Parse: %v", diags)
			}
			vd := n.Validate()
			checkGCSDiag(t, vd, tc)
			if tc.severity == hcl.DiagWarning && vd.HasErrors() {
				t.Errorf("a warning case has errors: %v", vd)
			}
		})
	}

	// What is fine: no diagnostics at all.
	for _, src := range []string{
		redisWith("    address = \"10.0.0.5:6379\"\n    prefix = \"goray-prod\"\n    db = 15\n"),
		redisWith("    address = \"[::1]:6379\"\n"),
		head + "gcs {\n  storage = \"memory\"\n  reconnect_timeout = \"1ms\"\n}\n",
		worker + "gcs {\n  reconnect_timeout = \"10m\"\n}\n",
	} {
		if _, vd := validateSrc(t, src); len(vd) != 0 {
			t.Errorf("%s: %v", src, vd)
		}
	}
}

// A worker node given --head becomes the head: its storage is used and no
// longer warned about; a head given --head=false ignores it.
func TestGCSHeadFromFlags(t *testing.T) {
	const src = "gcs {\n  storage = \"bolt\"\n}\n"
	n, diags := Parse([]byte(src), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	n.Override(Flags{Head: ptr(true)})
	if vd := n.Validate(); len(vd) != 0 {
		t.Errorf("--head: %v", vd)
	}
	n, _ = Parse([]byte("head {}\n"+src), "goray.hcl")
	n.Override(Flags{Head: ptr(false), Address: "10.0.0.1:6380"})
	checkGCSDiag(t, n.Validate(), gcsDiagCase{severity: hcl.DiagWarning, summary: "GCS storage on a node that is not the head", line: 3})
}

func TestGCSApplyEnv(t *testing.T) {
	env := map[string]string{
		EnvGCSRedisAddress:  "10.0.0.9:6379",
		EnvGCSRedisUsername: "env-user",
		EnvGCSRedisPassword: "env-pass",
	}
	tests := []struct {
		name string
		src  string
		env  map[string]string
		want Redis
	}{
		{name: "env fills an empty file", src: "", env: env,
			want: Redis{Address: "10.0.0.9:6379", Username: "env-user", Password: "env-pass"}},
		{name: "no env", src: "gcs {\n  redis {\n    db = 2\n  }\n}\n", env: nil,
			want: Redis{DB: 2}},
		{name: "the file wins", src: "gcs {\n  redis {\n    address = \"10.0.0.5:6379\"\n    username = \"file-user\"\n    password = \"file-pass\"\n  }\n}\n", env: env,
			want: Redis{Address: "10.0.0.5:6379", Username: "file-user", Password: "file-pass"}},
		{name: "per field", src: "gcs {\n  redis {\n    address = \"10.0.0.5:6379\"\n    prefix = \"p\"\n  }\n}\n", env: env,
			want: Redis{Address: "10.0.0.5:6379", Username: "env-user", Password: "env-pass", Prefix: "p"}},
		{name: "empty variables are unset", src: "", env: map[string]string{EnvGCSRedisAddress: ""},
			want: Redis{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, diags := Parse([]byte(tc.src), "goray.hcl")
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			n.ApplyEnv(envMap(tc.env))
			if n.GCS.Redis != tc.want {
				t.Errorf("Redis = %#v, want %#v", n.GCS.Redis, tc.want)
			}
		})
	}
	n := Default()
	n.ApplyEnv(nil)
	if n.GCS.Redis != (Redis{}) {
		t.Errorf("ApplyEnv(nil) filled %v", n.GCS.Redis)
	}
}

// LoadWithFlags reads the process's environment between Override and
// Validate.
func TestGCSEnvInLoadWithFlags(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.hcl")
	writeFile(t, path, "head {}\ngcs {\n  storage = \"redis\"\n}\n")

	t.Setenv(EnvGCSRedisAddress, "")
	t.Setenv(EnvGCSRedisUsername, "")
	t.Setenv(EnvGCSRedisPassword, "")
	_, diags := LoadWithFlags(path, Flags{})
	checkGCSDiag(t, diags, gcsDiagCase{severity: hcl.DiagError, summary: "Missing Redis address", line: 3})

	t.Setenv(EnvGCSRedisAddress, "10.0.0.9:6379")
	t.Setenv(EnvGCSRedisPassword, "from-env")
	n, diags := LoadWithFlags(path, Flags{})
	if len(diags) != 0 {
		t.Fatalf("with $%s: %v", EnvGCSRedisAddress, diags)
	}
	if r := n.GCS.Redis; r.Address != "10.0.0.9:6379" || r.Password != "from-env" || r.Username != "" {
		t.Errorf("Redis = %v", r)
	}

	// A bad address from the environment is blamed on the variable.
	t.Setenv(EnvGCSRedisAddress, "10.0.0.9")
	_, diags = LoadWithFlags(path, Flags{})
	checkGCSDiag(t, diags, gcsDiagCase{severity: hcl.DiagError, summary: "Invalid Redis address",
		want: []string{"$" + EnvGCSRedisAddress, `"10.0.0.9"`}})
	// ... but only where it is used: a worker node does not read it.
	n, diags = LoadWithFlags("", Flags{Address: "10.0.0.1:6380"})
	if len(diags) != 0 || n.GCS.Redis.Address != "10.0.0.9" {
		t.Errorf("worker node: Redis %v, diags %v", n.GCS.Redis, diags)
	}
}

func TestDataDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.hcl")
	tests := []struct {
		name    string
		src     string
		flags   Flags
		dataDir string // want Node.DataDir
		gcsDir  string // want GCSDataDir()
	}{
		{name: "default", src: "temp_dir = \"/t\"\n", dataDir: "", gcsDir: filepath.Join("/t", "data")},
		{name: "temp_dir flag", src: "temp_dir = \"/t\"\n", flags: Flags{TempDir: "/flag"}, dataDir: "", gcsDir: filepath.Join("/flag", "data")},
		{name: "relative to the file", src: "data_dir = \"state\"\n", dataDir: filepath.Join(dir, "state"), gcsDir: filepath.Join(dir, "state")},
		{name: "dot-dot relative", src: "data_dir = \"../state\"\n", dataDir: filepath.Join(filepath.Dir(dir), "state"), gcsDir: filepath.Join(filepath.Dir(dir), "state")},
		{name: "absolute", src: "data_dir = \"/var/lib/goray\"\n", dataDir: "/var/lib/goray", gcsDir: "/var/lib/goray"},
		{name: "flag wins", src: "data_dir = \"state\"\n", flags: Flags{DataDir: "/flag/data"}, dataDir: "/flag/data", gcsDir: "/flag/data"},
		{name: "flag without a file value", src: "", flags: Flags{DataDir: "rel"}, dataDir: "rel", gcsDir: "rel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, path, "head {}\n"+tc.src)
			n, diags := LoadWithFlags(path, tc.flags)
			if len(diags) != 0 {
				t.Fatalf("LoadWithFlags: %v", diags)
			}
			if n.DataDir != tc.dataDir || n.GCSDataDir() != tc.gcsDir {
				t.Errorf("DataDir = %q, GCSDataDir() = %q; want %q, %q", n.DataDir, n.GCSDataDir(), tc.dataDir, tc.gcsDir)
			}
			if _, ok := n.ranges[keyDataDir]; ok != (strings.HasPrefix(tc.src, "data_dir") && tc.flags.DataDir == "") {
				t.Errorf("range of data_dir kept = %v after flags %+v", ok, tc.flags)
			}
		})
	}

	// Without a file name, a relative data_dir is left as it is.
	n, diags := Parse([]byte("data_dir = \"state\"\n"), "")
	if diags.HasErrors() || n.DataDir != "state" {
		t.Errorf("Parse without a file name: DataDir %q, %v", n.DataDir, diags)
	}
	if got, want := Default().GCSDataDir(), filepath.Join(DefaultTempDir(), "data"); got != want {
		t.Errorf("Default().GCSDataDir() = %q, want %q", got, want)
	}
	if _, diags := Parse([]byte("data_dir = 1\n"), "goray.hcl"); !diags.HasErrors() {
		t.Error("a number as data_dir was accepted")
	}
}

// The Redis password never shows: not in a diagnostic's text, not in the
// source snippets FormatDiagnostics prints (even of the very line it is
// on), not in DiagnosticsError.Error, not when a Node is printed.
func TestRedisPasswordNotShown(t *testing.T) {
	const secret = "hunter2-s3cret"
	tests := []struct {
		name, file, src string
	}{
		{name: "one-line redis block on a worker node",
			src: "address = \"10.0.0.1:6380\"\ngcs {\n  storage = \"redis\"\n  redis { password = \"" + secret + "\" }\n}\n"},
		{name: "one-line redis block ignored on the head",
			src: "head {}\ngcs {\n  redis { password = \"" + secret + "\" }\n}\n"},
		{name: "redis without an address",
			src: "head {}\ngcs {\n  storage = \"redis\"\n  redis {\n    password = \"" + secret + "\"\n    db = -1\n  }\n}\n"},
		{name: "password is not a string",
			src: "head {}\ngcs {\n  redis {\n    password = " + secret + "\n  }\n}\n"},
		{name: "misspelt password argument",
			src: "head {}\ngcs {\n  redis {\n    passwd = \"" + secret + "\"\n  }\n}\n"},
		{name: "unterminated string",
			src: "head {}\ngcs {\n  redis {\n    password = \"" + secret + "\n  }\n}\n"},
		{name: "heredoc",
			src: "head {}\ngcs {\n  storage = \"rediss\"\n  redis { password = <<EOT\n" + secret + "\nEOT\n  }\n}\n"},
		{name: "address as a URL",
			src: "head {}\ngcs {\n  storage = \"redis\"\n  redis { address = \"redis://goray:" + secret + "@10.0.0.5:6379\" }\n}\n"},
		{name: "JSON on one line", file: "goray.json",
			src: `{"head": {}, "gcs": {"storage": "rediss", "redis": {"password": "` + secret + `", "db": -1}}}`},
		{name: "JSON syntax error", file: "goray.json",
			src: `{"head": {}, "gcs": {"redis": {"password": "` + secret + `"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "goray.hcl"
			}
			n, diags := Parse([]byte(tc.src), file)
			if !diags.HasErrors() {
				diags = append(diags, n.Validate()...)
			}
			if len(diags) == 0 {
				t.Fatal("no diagnostics; the case shows nothing")
			}
			out := FormatDiagnostics(diags, n.Files(), 0, false) + "\n" + FormatDiagnostics(diags, n.Files(), 40, true)
			if err := NewDiagnosticsError(diags, n.Files()); err != nil {
				out += "\n" + err.Error()
			}
			out += fmt.Sprintf("\n%v\n%+v\n%#v\n%s\n%v", n, n, n, n.GCS.Redis, n.GCS)
			if strings.Contains(out, secret) || strings.Contains(out, "s3cret") {
				t.Fatalf("the password shows:\n%s", out)
			}
			// The snippets still show the source around it.
			if !strings.Contains(out, "on "+file+" line") {
				t.Errorf("no source snippet:\n%s", out)
			}
		})
	}

	// A password from the environment does not show either.
	n, _ := Parse([]byte("head {}\ngcs {\n  storage = \"redis\"\n  redis {\n    db = -1\n  }\n}\n"), "goray.hcl")
	n.ApplyEnv(envMap(map[string]string{EnvGCSRedisPassword: secret}))
	vd := n.Validate()
	if out := FormatDiagnostics(vd, n.Files(), 0, false) + fmt.Sprintf("%v %+v %#v", n, n, n.GCS); strings.Contains(out, secret) {
		t.Fatalf("the password shows:\n%s", out)
	}
	if n.GCS.Redis.Password != secret {
		t.Fatal("ApplyEnv did not fill the password")
	}
}

func TestRedisString(t *testing.T) {
	r := Redis{Address: "10.0.0.5:6379", Username: "goray", Password: "pw-123", DB: 2, Prefix: "p"}
	for _, s := range []string{r.String(), r.GoString(), fmt.Sprint(r), fmt.Sprintf("%+v", &r), fmt.Sprintf("%#v", r)} {
		if strings.Contains(s, "pw-123") || !strings.Contains(s, "10.0.0.5:6379") || !strings.Contains(s, "(hidden)") {
			t.Errorf("%q", s)
		}
	}
	if s := (Redis{}).String(); strings.Contains(s, "hidden") {
		t.Errorf("an empty password shows as set: %q", s)
	}
}

// The masked source keeps every byte offset and line, so ranges still
// point at the right text.
func TestRedactSourceKeepsLayout(t *testing.T) {
	src := "head {}\ngcs {\n  redis {\n    password = \"abc\\\"def\"\n    address = \"h:1\"\n  }\n}\n"
	n, diags := Parse([]byte(src), "goray.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	got := n.Files()["goray.hcl"].Bytes
	want := "head {}\ngcs {\n  redis {\n    password = \"********\"\n    address = \"h:1\"\n  }\n}\n"
	if string(got) != want {
		t.Errorf("masked source:\n%s\nwant\n%s", got, want)
	}
	if n.GCS.Redis.Password != `abc"def` {
		t.Errorf("decoded password %q", n.GCS.Redis.Password)
	}
	// The parsed file itself is not changed (it is the parser's).
	if b, err := os.ReadFile(filepath.Join("testdata", "full.hcl")); err == nil {
		n, _ := Load(filepath.Join("testdata", "full.hcl"))
		if m := n.Files()[filepath.Join("testdata", "full.hcl")].Bytes; len(m) != len(b) || strings.Contains(string(m), "full-hcl-password") {
			t.Errorf("full.hcl masked to %d bytes (from %d), password shown: %v", len(m), len(b), strings.Contains(string(m), "full-hcl-password"))
		}
	}
}
