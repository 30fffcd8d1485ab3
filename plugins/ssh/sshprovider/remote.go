package sshprovider

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// What the provider keeps on each host, under the host's remote_dir R
// (a directory of the SSH user's, mode 0700):
//
//	R/bin/<sha256>/goray  goray binaries, by the sha256 of their content: uploaded once
//	R/instance.json       the record of the instance the host runs (at most one)
//	R/token               the cluster token of that instance (0600)
//	R/node.pid            the pid of its node, once it serves
//	R/n/                  the node's temp dir (goray's session dirs, sockets, logs)
//
// A host runs at most one node, so the record is one file: what runs
// there (which cluster, instance, launch request and node type) is read
// back from the host alone, and a host whose record names a live node is
// not free.

// File names under a host's remote_dir.
const (
	recordFileName = "instance.json"
	pidFileName    = "node.pid"
	tokenFileName  = "token"
	nodeDirName    = "n"
	binDirName     = "bin"
)

// Markers of the scripts' output lines the provider reads.
const (
	markScan    = "goray-ssh-scan"
	markBinary  = "goray-ssh-binary"
	markStarted = "goray-ssh-started"
	markStop    = "goray-ssh-stop"
)

// recordVersion is the version of the host record format.
const recordVersion = 1

// hostRecord is R/instance.json.
type hostRecord struct {
	Version    int       `json:"version"`
	Cluster    string    `json:"cluster"`
	ID         string    `json:"id"`
	RequestID  string    `json:"request_id"`
	NodeType   string    `json:"node_type"`
	LaunchedAt time.Time `json:"launched_at"`
	// Goray is the goray binary on the host that runs the node.
	Goray string `json:"goray"`
}

// Node states a scan reports.
const (
	nodeAlive     = "alive"     // the node process runs
	nodeDead      = "dead"      // it ran and is gone
	nodeUnstarted = "unstarted" // recorded, never served (being launched, or a launch that died)
)

// scanResult is what a host runs, as a scan saw it.
type scanResult struct {
	// at is when the scan started: what it saw is no older.
	at time.Time
	// err is why the host could not be scanned (nil: it was).
	err error
	// record is the host's instance record (nil: none).
	record *hostRecord
	// node is nodeAlive, nodeDead or nodeUnstarted (with a record).
	node string
	pid  int
	// binary says the goray binary asked for is there (prepare only).
	binary bool
}

// q quotes s for sh.
func q(s string) string { return shellQuote(s) }

// nodeDir is the node's temp dir on a host.
func nodeDir(remoteDir string) string { return path.Join(remoteDir, nodeDirName) }

// binPath is the content-addressed path of a goray binary on a host.
func binPath(remoteDir, sum string) string { return path.Join(remoteDir, binDirName, sum, "goray") }

// unsetGoray unsets every GORAY_* variable of the login environment: a
// node inherits none (the token's other sources would override the token
// file), but what the provider sets.
const unsetGoray = `for v in $(env | sed -n 's/^\(GORAY_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
`

// scanBody prints what the host runs: a line "goray-ssh-scan none", or
// "goray-ssh-scan <node state> <pid>" followed by the record. $R is set.
const scanBody = `f="$R/` + recordFileName + `"
if [ ! -f "$f" ]; then echo "` + markScan + ` none"; exit 0; fi
pid=$(cat "$R/` + pidFileName + `" 2>/dev/null || true)
node=` + nodeUnstarted + `
case "$pid" in
''|*[!0-9]*) pid=0 ;;
*) node=` + nodeDead + `
   if tr '\0' '\n' 2>/dev/null < "/proc/$pid/cmdline" | grep -qxF -- "$R/` + nodeDirName + `"; then node=` + nodeAlive + `; fi ;;
esac
echo "` + markScan + ` $node $pid"
cat "$f"
echo
`

// scanScript reports what the host with remote_dir dir runs.
func scanScript(dir string) string {
	return "R=" + q(dir) + "\n" + scanBody
}

// prepareScript makes remote_dir (owner-only, refusing one that is not a
// directory of the user's), says whether the goray binary is there, then
// scans.
func prepareScript(dir, goray string) string {
	return "set -e\nR=" + q(dir) + `
umask 077
mkdir -p "$R"
if [ -L "$R" ] || [ ! -d "$R" ] || [ ! -O "$R" ]; then
  echo "goray-provider-ssh: $R is not a directory of $(id -un)'s: refusing to use it" >&2; exit 3
fi
chmod 700 "$R"
if [ -x ` + q(goray) + ` ]; then echo "` + markBinary + ` present"; else echo "` + markBinary + ` missing"; fi
set +e
` + scanBody
}

// uploadScript writes stdin (size bytes of sha256 sum) to the
// content-addressed goray binary: into a temporary file, checked, then
// renamed into place, so the binary is whole or absent.
func uploadScript(dir, sum string, size int64) string {
	return "set -e\nR=" + q(dir) + "\nsum=" + q(sum) + "\nsize=" + strconv.FormatInt(size, 10) + `
umask 077
d="$R/` + binDirName + `/$sum"
mkdir -p "$d"
t="$d/.goray.$$"
trap 'rm -f "$t"' EXIT
cat > "$t"
n=$(wc -c < "$t" | tr -d ' ')
if [ "$n" != "$size" ]; then echo "goray-provider-ssh: the goray binary arrived with $n bytes of $size" >&2; exit 3; fi
if command -v sha256sum >/dev/null 2>&1; then
  set -- $(sha256sum "$t")
  if [ "$1" != "$sum" ]; then echo "goray-provider-ssh: the goray binary arrived with sha256 $1, want $sum" >&2; exit 3; fi
fi
chmod 700 "$t"
mv -f "$t" "$d/goray"
`
}

// installScript writes the cluster token (stdin) and the instance's
// record, clears what an earlier node left in the node's temp dir
// (stopping anything still running there with goray), and, when keep is
// set, removes the goray binaries of remote_dir/bin but keep (the host
// runs no other node: they are not in use).
func installScript(dir string, rec *hostRecord, keep string) (string, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	return "set -e\nR=" + q(dir) + `
umask 077
cat > "$R/.` + tokenFileName + `.tmp"
if [ -s "$R/.` + tokenFileName + `.tmp" ]; then mv -f "$R/.` + tokenFileName + `.tmp" "$R/` + tokenFileName + `"; else rm -f "$R/.` + tokenFileName + `.tmp" "$R/` + tokenFileName + `"; fi
printf '%s\n' ` + q(string(b)) + ` > "$R/.` + recordFileName + `.tmp"
mv -f "$R/.` + recordFileName + `.tmp" "$R/` + recordFileName + `"
rm -f "$R/` + pidFileName + `"
if [ -e "$R/` + nodeDirName + `" ]; then
  ` + unsetGoray + `  ` + q(rec.Goray) + ` stop --temp-dir "$R/` + nodeDirName + `" --force >/dev/null 2>&1 || true
  rm -rf "$R/` + nodeDirName + `"
fi
keep=` + q(keep) + `
if [ -n "$keep" ]; then
  for d in "$R/` + binDirName + `"/*; do
    if [ -d "$d" ] && [ "${d##*/}" != "$keep" ]; then rm -rf "$d"; fi
  done
fi
`, nil
}

// setupScript runs the cluster's setup commands, stopping at the first
// that fails, in the user's home directory.
func setupScript(cmds []string) string {
	return "set -e\ncd \"${HOME:-/}\" 2>/dev/null || cd /\n" + strings.Join(cmds, "\n") + "\n"
}

// startScript runs argv (`goray start` without --block: it returns once
// the node serves) in remote_dir with no GORAY_* variable of the login
// environment but the auth mode, and records the node's pid (from its
// node.json) in R/node.pid.
func startScript(dir string, argv []string, authMode string) string {
	var b strings.Builder
	b.WriteString("R=" + q(dir) + "\ncd \"$R\" || exit 3\n" + unsetGoray)
	if authMode != "" {
		b.WriteString("GORAY_AUTH_MODE=" + q(authMode) + "\nexport GORAY_AUTH_MODE\n")
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		args[i] = q(a)
	}
	b.WriteString("if out=$(" + strings.Join(args, " ") + ` 2>&1); then :; else st=$?; printf '%s\n' "$out"; exit $st; fi
printf '%s\n' "$out"
pid=
for j in "$R/` + nodeDirName + `"/session_*/node.json; do
  [ -f "$j" ] && pid=$(sed -n 's/^ *"pid": *\([0-9][0-9]*\).*/\1/p' "$j" | head -n 1)
done
case "$pid" in
''|*[!0-9]*) echo "goray-provider-ssh: goray start returned, but no node.json under $R/` + nodeDirName + ` names the node's process" >&2; exit 3 ;;
esac
echo "$pid" > "$R/` + pidFileName + `"
echo "` + markStarted + ` $pid"
`)
	return b.String()
}

// stopScript stops the node of instance id (goray stop on its temp dir,
// grace before SIGKILL) and removes its files, unless the host's record
// is another instance's by now.
func stopScript(dir, id, goray string, grace time.Duration) string {
	return "R=" + q(dir) + "\ng=" + q(goray) + `
f="$R/` + recordFileName + `"
if [ -f "$f" ] && ! grep -qF ` + q(`"id":`+strconv.Quote(id)) + ` "$f"; then echo "` + markStop + ` other"; exit 0; fi
` + unsetGoray + `if [ -d "$R/` + nodeDirName + `" ]; then
  if [ -n "$g" ] && [ -x "$g" ]; then
    GORAY_AUTH_TOKEN_PATH="$R/` + tokenFileName + `" "$g" stop --temp-dir "$R/` + nodeDirName + `" --grace ` + q(grace.String()) + ` || exit $?
  else
    pid=$(cat "$R/` + pidFileName + `" 2>/dev/null || true)
    case "$pid" in ''|*[!0-9]*) ;; *) kill -9 "$pid" 2>/dev/null || true ;; esac
  fi
fi
rm -rf "$R/` + nodeDirName + `" "$R/` + tokenFileName + `" "$R/` + pidFileName + `" "$f"
echo "` + markStop + ` done"
`
}

// parseScan reads the output of a scan (or of a prepare, whose binary
// line comes first).
func parseScan(out string) (*scanResult, error) {
	r := &scanResult{}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if v, ok := strings.CutPrefix(l, markBinary+" "); ok {
			r.binary = strings.TrimSpace(v) == "present"
			continue
		}
		v, ok := strings.CutPrefix(l, markScan+" ")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 1 && f[0] == "none" {
			return r, nil
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("unexpected scan line %q", l)
		}
		r.node = f[0]
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("unexpected scan line %q", l)
		}
		r.pid = pid
		rest := strings.TrimSpace(strings.Join(lines[i+1:], "\n"))
		var rec hostRecord
		if err := json.Unmarshal([]byte(rest), &rec); err != nil || rec.ID == "" {
			return nil, fmt.Errorf("the host's record %s is not one this provider wrote: %q", recordFileName, lastLines(rest, 3))
		}
		r.record = &rec
		return r, nil
	}
	return nil, fmt.Errorf("the scan printed no %s line; output: %q", markScan, lastLines(out, 5))
}

// parseStarted returns the node's pid from a start's output.
func parseStarted(out string) (int, bool) {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), markStarted+" "); ok {
			pid, err := strconv.Atoi(v)
			return pid, err == nil && pid > 0
		}
	}
	return 0, false
}
