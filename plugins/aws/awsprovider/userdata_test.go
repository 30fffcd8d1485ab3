package awsprovider_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goray-dev/goray/internal/testservers/mototest"
	"github.com/goray-dev/goray/plugins/aws/awsprovider"
	"github.com/goray-dev/goray/plugins/aws/internal/awstest"
	"github.com/goray-dev/goray/sdk/plugin/plugintest"
	"github.com/goray-dev/goray/sdk/provider"
	"github.com/goray-dev/goray/sdk/provider/providertest/headtest"
)

// gorayBin is the goray CLI, built once by TestMain.
var gorayBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gab")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if gorayBin, err = headtest.BuildGoray(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// runUserData runs an instance's user data as cloud-init would (/bin/sh,
// a bare environment), with imds as its metadata service and no systemd,
// and returns its output and error.
func runUserData(ctx context.Context, t *testing.T, dir, ud string, imds *awstest.IMDS) (string, error) {
	t.Helper()
	script := filepath.Join(dir, fmt.Sprintf("user-data-%d", time.Now().UnixNano()))
	if err := os.WriteFile(script, []byte(ud), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", script)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir,
		awsprovider.EnvUserDataIMDS + "=" + imds.URL, awsprovider.EnvUserDataSystemd + "=no"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestUserDataJoins runs the user data of an instance moto launched on
// this machine, as cloud-init would, against a stand-in of the instance
// metadata service: it downloads goray (once: a second run finds it by
// its sha256), writes the token to a file only its owner reads, runs the
// setup commands and starts a node that joins the real head as the
// instance (its id as node name and instance-id label, its private IP),
// with no token on its command line or in its environment. With a wrong
// sha256 it runs nothing.
func TestUserDataJoins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	moto := mototest.Start(t)
	head := headtest.StartHead(ctx, t, gorayBin)
	files := awstest.ServeFile(t, gorayBin, "goray")
	sum := fileSHA256(t, gorayBin)
	dir := headtest.LeakCheckedDir(t, "gau")
	// instance_dir, as short as can be: at most 27 bytes.
	instDir := headtest.LeakCheckedDir(t, "g")
	goray := filepath.Join(dir, "bin", "goray")
	p := open(t, moto.Endpoint, func(cfg *awsprovider.Config) {
		cfg.GorayURL, cfg.GoraySHA256, cfg.GorayPath, cfg.InstanceDir = files.URL, sum, goray, instDir
	})
	const cluster = "userdata"
	setupOut := filepath.Join(dir, "setup.out")
	req := &provider.LaunchRequest{RequestID: "r1", ClusterName: cluster, NodeType: "cpu", Count: 1, NodeConfig: nodeConfig(t, nil),
		Node: provider.NodeSpec{HeadAddress: head.Addr, AuthToken: head.Token,
			Resources:     map[string]float64{provider.ResourceCPU: 1, provider.ResourceObjectStoreMemory: 32 << 20},
			Labels:        map[string]string{provider.LabelClusterName: cluster, provider.LabelNodeType: "cpu"},
			SetupCommands: []string{"echo setup ran > " + setupOut}}}
	if _, err := p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	ins := list(ctx, t, p, cluster)
	if len(ins) != 1 {
		t.Fatalf("List: %+v", ins)
	}
	id := ins[0].ID
	ud := userDataOf(ctx, t, ec2Client(moto.Endpoint), id)
	const ip = "127.0.6.1"
	imds := awstest.StartIMDS(t, id, ip)

	// stopNode stops the instance's node and waits until its processes are
	// gone and the head no longer counts it alive.
	stopNode := func() {
		t.Helper()
		if _, err := head.Run(ctx, "stop", "--temp-dir", filepath.Join(instDir, "t")); err != nil {
			t.Fatal(err)
		}
		if err := plugintest.Eventually(ctx, func() error {
			if left := append(headtest.Processes(dir), headtest.Processes(instDir)...); len(left) > 0 {
				return fmt.Errorf("processes left: %v", left)
			}
			s, err := head.Status(ctx)
			if err != nil {
				return err
			}
			if s.AliveNodes != 1 {
				return fmt.Errorf("%d alive nodes; want the head alone", s.AliveNodes)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// joined waits for the instance's node to be alive in the cluster.
	joined := func() headtest.Node {
		t.Helper()
		var node headtest.Node
		err := plugintest.Eventually(ctx, func() error {
			s, err := head.Status(ctx)
			if err != nil {
				return err
			}
			for _, n := range s.Nodes {
				if !n.IsHead && n.State == "ALIVE" {
					node = n
					return nil
				}
			}
			b, _ := os.ReadFile(filepath.Join(instDir, "node.out"))
			return fmt.Errorf("no alive worker node; the node's output: %s", b)
		})
		if err != nil {
			t.Fatal(err)
		}
		return node
	}

	out, err := runUserData(ctx, t, dir, ud, imds)
	if err != nil {
		t.Fatalf("the user data failed: %v\n%s", err, out)
	}
	if !strings.Contains(out, "started the goray node of instance "+id+" ("+ip+")") {
		t.Errorf("the user data's output: %s", out)
	}
	node := joined()
	if node.NodeName != id || node.Labels[provider.LabelInstanceID] != id || node.Labels[provider.LabelNodeType] != "cpu" || node.Labels[provider.LabelClusterName] != cluster {
		t.Errorf("the node: %+v; want node name and instance-id label %s", node, id)
	}
	if !strings.HasPrefix(node.SessionDir, filepath.Join(instDir, "t")+"/") {
		t.Errorf("the node's session %s is not under instance_dir/t", node.SessionDir)
	}
	if files.Downloads() != 1 || fileSHA256(t, goray) != sum {
		t.Errorf("goray downloaded %d times (want 1), sha256 at %s matches: %v", files.Downloads(), goray, fileSHA256(t, goray) == sum)
	}
	if imds.PlainGets() != 0 {
		t.Errorf("the user data asked the metadata service %d times without an IMDSv2 token", imds.PlainGets())
	}
	for path, want := range map[string]os.FileMode{instDir: 0o700 | os.ModeDir, filepath.Join(instDir, "auth_token"): 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode() != want {
			t.Errorf("%s: %v, %v; want mode %v", path, st.Mode(), err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(instDir, "auth_token")); err != nil || strings.TrimSpace(string(b)) != head.Token {
		t.Errorf("the token file holds %q, %v; want the cluster's token", b, err)
	}
	if b, err := os.ReadFile(setupOut); err != nil || string(b) != "setup ran\n" {
		t.Errorf("the setup command's output: %q, %v", b, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", node.Pid))
	if err != nil {
		t.Fatalf("the node's process %d: %v", node.Pid, err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", node.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cmdline), head.Token) || strings.Contains(string(environ), head.Token) {
		t.Error("the token is on the node's command line or in its environment")
	}
	if !strings.Contains(string(cmdline), "--node-ip\x00"+ip+"\x00") {
		t.Errorf("the node does not run with --node-ip %s: %q", ip, cmdline)
	}

	// A second run (goray is there, with its sha256): no download.
	stopNode()
	if out, err := runUserData(ctx, t, dir, ud, imds); err != nil {
		t.Fatalf("the user data, again: %v\n%s", err, out)
	}
	joined()
	if n := files.Downloads(); n != 1 {
		t.Errorf("the second run downloaded goray again (%d downloads)", n)
	}
	stopNode()

	// A download whose sha256 is not goray_sha256 never runs.
	bad := open(t, moto.Endpoint, func(cfg *awsprovider.Config) {
		cfg.GorayURL, cfg.GoraySHA256, cfg.GorayPath, cfg.InstanceDir = files.URL, fakeSHA, filepath.Join(dir, "bin2", "goray"), instDir
	})
	req.RequestID = "r2"
	if _, err := bad.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	var badID string
	for _, in := range list(ctx, t, bad, cluster) {
		if in.RequestID == "r2" {
			badID = in.ID
		}
	}
	out, err = runUserData(ctx, t, dir, userDataOf(ctx, t, ec2Client(moto.Endpoint), badID), awstest.StartIMDS(t, badID, ip))
	if err == nil || !strings.Contains(out, "has sha256 "+sum+", want "+fakeSHA+": not running it") {
		t.Errorf("a download with the wrong sha256: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "bin2", "goray")); err == nil {
		t.Error("the download with the wrong sha256 was kept")
	}
	if left := append(headtest.Processes(dir), headtest.Processes(instDir)...); len(left) > 0 {
		t.Errorf("a node started from a download with the wrong sha256: %v", left)
	}
}
