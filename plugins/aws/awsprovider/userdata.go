package awsprovider

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goray-dev/goray/sdk/provider"
)

// MaxUserData is the largest user data EC2 takes, in bytes (before base64).
const MaxUserData = 16 << 10

// Environment variables the user data script reads, for running it
// outside EC2 (the tests): where the instance metadata service is, and
// whether to start the node with systemd ("yes", "no"; default "auto": if
// the instance runs systemd).
const (
	EnvUserDataIMDS    = "GORAY_USERDATA_IMDS"
	EnvUserDataSystemd = "GORAY_USERDATA_SYSTEMD"
)

// Placeholders in the node's command line for what only the instance
// knows; they become shell variables of the start script.
const (
	phInstanceID = "@@GORAY_INSTANCE_ID@@"
	phNodeIP     = "@@GORAY_NODE_IP@@"
	phDir        = "@@GORAY_DIR@@"
	phPrefix     = "@@GORAY_"
)

// placeholderVars maps the placeholders to the start script's variables.
var placeholderVars = []struct{ ph, name string }{
	{phInstanceID, "INSTANCE_ID"},
	{phNodeIP, "NODE_IP"},
	{phDir, "GORAY_DIR"},
}

// userData is what an instance's user data is made of.
type userData struct {
	cluster, nodeType, requestID string
	node                         provider.NodeSpec
	extraArgs                    []string
	gorayPath                    string // where goray is on the instance
	gorayURL, goraySHA256        string
	instanceDir                  string
}

// startCommand returns the shell command line (provider.ShellJoin's
// quoting) that starts the node, with the shell variables INSTANCE_ID,
// NODE_IP and GORAY_DIR where the instance's id, private IP and
// instance_dir go.
func (u userData) startCommand() (string, error) {
	o := provider.StartOptions{
		Goray:      u.gorayPath,
		NodeIP:     phNodeIP,
		TempDir:    phDir + "/t",
		InstanceID: phInstanceID,
		Block:      true,
		Extra:      u.extraArgs,
	}
	if u.node.AuthToken != "" {
		o.TokenFile = phDir + "/auth_token"
	}
	args, err := u.node.StartArgs(o)
	if err != nil {
		return "", err
	}
	for _, a := range u.extraArgs {
		if strings.Contains(a, phPrefix) {
			return "", fmt.Errorf("%w: node_config extra_args: %q contains %q, which the provider uses itself", provider.ErrInvalidRequest, a, phPrefix)
		}
	}
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = shellWord(a)
	}
	return strings.Join(parts, " "), nil
}

// shellWord quotes a for a POSIX shell as provider.ShellJoin does, with
// each placeholder replaced by its variable ("${NAME}", expanded by the
// shell).
func shellWord(a string) string {
	type piece struct {
		text  string
		isVar bool
	}
	pieces := []piece{{text: a}}
	for _, pv := range placeholderVars {
		var next []piece
		for _, p := range pieces {
			if p.isVar {
				next = append(next, p)
				continue
			}
			for i, part := range strings.Split(p.text, pv.ph) {
				if i > 0 {
					next = append(next, piece{text: pv.name, isVar: true})
				}
				if part != "" {
					next = append(next, piece{text: part})
				}
			}
		}
		pieces = next
	}
	if len(pieces) == 0 {
		return "''"
	}
	var b strings.Builder
	for _, p := range pieces {
		if p.isVar {
			b.WriteString(`"${` + p.text + `}"`)
		} else {
			b.WriteString(provider.ShellJoin([]string{p.text}))
		}
	}
	return b.String()
}

// render returns the user data: a shell script cloud-init runs as root at
// the instance's first boot (see the package doc and docs/aws.md).
func (u userData) render() (string, error) {
	start, err := u.startCommand()
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(u.node.AuthToken, "\x00\n\r") {
		return "", fmt.Errorf("%w: the cluster token has a control character", provider.ErrInvalidRequest)
	}
	q := func(s string) string { return provider.ShellJoin([]string{s}) }
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("#!/bin/sh\n")
	w("# A goray node of cluster %s, node type %s, launch request %s:\n",
		strconv.Quote(u.cluster), strconv.Quote(u.nodeType), strconv.Quote(u.requestID))
	w("# written by goray-provider-aws, run by cloud-init as root at the first boot.\n")
	w("# It fetches goray (checked against its sha256), writes the cluster token to a\n")
	w("# file only root reads, runs the setup commands and starts the node.\n")
	w("set -eu\n")
	w("umask 077\n")
	w("IMDS=${%s:-http://169.254.169.254}\n", EnvUserDataIMDS)
	w("SYSTEMD=${%s:-auto}\n", EnvUserDataSystemd)
	w("GORAY=%s\n", q(u.gorayPath))
	w("GORAY_URL=%s\n", q(u.gorayURL))
	w("GORAY_SHA256=%s\n", q(u.goraySHA256))
	w("GORAY_DIR=%s\n", q(u.instanceDir))
	w("%s", `say() { echo "goray-user-data: $*" >&2; }
imds() {
  t=$(curl -fsS --retry 10 --retry-connrefused -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$IMDS/latest/api/token") &&
    curl -fsS --retry 10 -H "X-aws-ec2-metadata-token: $t" "$IMDS/latest/meta-data/$1"
}
sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }

INSTANCE_ID=$(imds instance-id) || { say "no instance id from the instance metadata service"; exit 1; }
NODE_IP=$(imds local-ipv4) || { say "no private IP from the instance metadata service"; exit 1; }
case $INSTANCE_ID in ''|*[!a-z0-9-]*) say "the instance id '$INSTANCE_ID' is not one"; exit 1;; esac
case $NODE_IP in ''|*[!0-9.]*) say "the private IP '$NODE_IP' is not an IPv4 address"; exit 1;; esac

# goray, content-addressed: downloaded only when the file there does not
# have the sha256, and run only once the download has it.
if [ -n "$GORAY_SHA256" ] && [ "$(sha "$GORAY")" != "$GORAY_SHA256" ]; then
  if [ -z "$GORAY_URL" ]; then say "$GORAY does not have sha256 $GORAY_SHA256"; exit 1; fi
  mkdir -p "$(dirname "$GORAY")"
  tmp="$GORAY.download.$$"
  curl -fsSL --retry 10 --retry-connrefused -o "$tmp" "$GORAY_URL" || { rm -f "$tmp"; say "downloading $GORAY_URL failed"; exit 1; }
  got=$(sha "$tmp")
  if [ "$got" != "$GORAY_SHA256" ]; then
    rm -f "$tmp"
    say "$GORAY_URL has sha256 $got, want $GORAY_SHA256: not running it"
    exit 1
  fi
  chmod 0755 "$tmp"
  mv -f "$tmp" "$GORAY"
fi

mkdir -p "$GORAY_DIR"
chmod 0700 "$GORAY_DIR"
`)
	if u.node.AuthToken != "" {
		w("# The cluster token (printf is a builtin: it is on no command line).\n")
		w("printf '%%s\\n' %s > \"$GORAY_DIR/auth_token\"\n", q(u.node.AuthToken))
		w("chmod 0600 \"$GORAY_DIR/auth_token\"\n")
	}
	if len(u.node.SetupCommands) > 0 {
		w("\n# The cluster's setup commands.\n")
		for i, c := range u.node.SetupCommands {
			w("/bin/sh -c %s || { say %s; exit 1; }\n", q(c), q(fmt.Sprintf("setup command %d of %d failed: the node is not started", i+1, len(u.node.SetupCommands))))
		}
	}
	w("\n# The node.\n")
	w("%s", `cat > "$GORAY_DIR/start.sh" <<GORAY_VARS_EOF
#!/bin/sh
INSTANCE_ID=$INSTANCE_ID
NODE_IP=$NODE_IP
GORAY_DIR=$GORAY_DIR
export HOME=\${HOME:-/root}
GORAY_VARS_EOF
cat >> "$GORAY_DIR/start.sh" <<'GORAY_START_EOF'
`)
	w("exec %s\n", start)
	w("%s", `GORAY_START_EOF
chmod 0700 "$GORAY_DIR/start.sh"
if [ "$SYSTEMD" = auto ]; then
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then SYSTEMD=yes; else SYSTEMD=no; fi
fi
if [ "$SYSTEMD" = yes ]; then
  cat > /etc/systemd/system/goray-node.service <<GORAY_UNIT_EOF
[Unit]
Description=goray node
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/bin/sh $GORAY_DIR/start.sh
Restart=no
KillMode=mixed
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
GORAY_UNIT_EOF
  systemctl daemon-reload
  systemctl enable --now goray-node.service
else
  nohup /bin/sh "$GORAY_DIR/start.sh" > "$GORAY_DIR/node.out" 2>&1 < /dev/null &
fi
say "started the goray node of instance $INSTANCE_ID ($NODE_IP)"
`)
	out := b.String()
	if len(out) > MaxUserData {
		return "", fmt.Errorf("%w: the user data would be %d bytes; EC2 takes at most %d (shorten the setup commands or extra_args)", provider.ErrInvalidRequest, len(out), MaxUserData)
	}
	return out, nil
}
