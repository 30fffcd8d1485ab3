package localprovider

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/goray-dev/goray/sdk/provider"
)

// Files in an instance's temp dir besides the node's session dirs.
const (
	// readyFileName is written by the node once it serves (`goray start
	// --ready-file`): the instance is running.
	readyFileName = "ready.json"
	// outputFileName takes the node's stdout and stderr until it serves
	// (then it logs into its session dir), and the setup commands' output.
	outputFileName = "node.out"
)

// tokenFileName holds the cluster token (owner-only, as goray's own token
// file), so that a provider restarted between recording an instance and
// starting its node can still start it. It goes with the instance's dir.
const tokenFileName = ".token"

// prepareDir creates the temp dir of a planned instance with its token
// file.
func prepareDir(in *instanceRecord, token string) error {
	if err := os.Mkdir(in.Dir, 0o700); err != nil {
		return err
	}
	if token != "" {
		return os.WriteFile(filepath.Join(in.Dir, tokenFileName), []byte(token), 0o600)
	}
	return nil
}

// readToken returns the token in the instance's dir ("" when it has none).
func readToken(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, tokenFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

// setupArg0 is the name the setup shell runs under ($0).
const setupArg0 = "goray-local-setup"

// envToken is the variable a node reads the cluster token from.
const envToken = "GORAY_AUTH_TOKEN"

// nodeArgs returns the command line that runs the node of instance id
// (address ip, temp dir dir) for spec: `goray start ... --block`, behind a
// shell that runs spec.SetupCommands first when there are any. The token
// is not on it (the node gets it in its environment).
func nodeArgs(goray string, spec provider.NodeSpec, id, ip, dir string, extra []string) (argv []string, err error) {
	args, err := spec.StartArgs(provider.StartOptions{Goray: goray, NodeIP: ip, TempDir: dir, InstanceID: id,
		Block: true, ReadyFile: filepath.Join(dir, readyFileName), Extra: extra})
	if err != nil {
		return nil, err
	}
	if len(spec.SetupCommands) == 0 {
		return args, nil
	}
	script := "set -e\n" + strings.Join(spec.SetupCommands, "\n") + "\nexec \"$@\"\n"
	return append([]string{"/bin/sh", "-c", script, setupArg0}, args...), nil
}

// keptEnv are the goray variables of the provider's environment a node
// inherits: the cluster's auth mode and TLS files. Every other GORAY_*
// variable is dropped: the token's other sources, the plugin protocol's,
// and those that tie a process to the node, worker, driver or daemon the
// provider runs under (goray stop on the head would take the instances
// for its own leftovers). PLUGIN_* (go-plugin's) are dropped too.
var keptEnv = []string{"GORAY_AUTH_MODE=", "GORAY_TLS_"}

// nodeEnv returns the node's environment: the provider's, without its
// GORAY_* variables but keptEnv and without PLUGIN_*, with the cluster
// token in GORAY_AUTH_TOKEN.
func nodeEnv(base []string, token string) []string {
	env := make([]string, 0, len(base)+1)
	for _, kv := range base {
		keep := !strings.HasPrefix(kv, "GORAY_") && !strings.HasPrefix(kv, "PLUGIN_") ||
			slices.ContainsFunc(keptEnv, func(p string) bool { return strings.HasPrefix(kv, p) })
		if keep {
			env = append(env, kv)
		}
	}
	if token != "" {
		env = append(env, envToken+"="+token)
	}
	return env
}

// startNode starts argv as the detached node process of the instance in
// dir: a session of its own (SIGTERM to its group stops it; the provider
// can die and restart without taking it along), stdin from /dev/null,
// output into dir/node.out, working directory dir. onExit runs with how
// it ended once it has been reaped.
func startNode(argv, env []string, dir string, onExit func(status string)) (int, error) {
	out, err := os.OpenFile(filepath.Join(dir, outputFileName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() {
		err := cmd.Wait()
		status := "exited with status 0"
		if err != nil {
			status = err.Error()
		}
		onExit(status)
	}()
	return cmd.Process.Pid, nil
}

// tailBytes and tailLines bound the output a LaunchError quotes.
const (
	tailBytes = 4 << 10
	tailLines = 20
)

// outputTail returns the last lines of the node's output in dir.
func outputTail(dir string) string {
	f, err := os.Open(filepath.Join(dir, outputFileName))
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > tailBytes {
		_, _ = f.Seek(st.Size()-tailBytes, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, tailBytes))
	b = bytes.TrimRight(b, "\n")
	lines := strings.Split(string(b), "\n")
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
