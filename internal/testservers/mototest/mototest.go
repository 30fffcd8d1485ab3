// Package mototest runs a real EC2 API emulator for tests: moto's server
// (PyPI's moto[server], pinned in the Makefile and installed by `make moto`
// into <module root>/.tools/moto, or named by $GORAY_MOTO_SERVER), started
// on 127.0.0.1 at a free port with a directory of its own, checked to
// answer, and killed (its directory removed) when the test ends.
//
// The server validates image ids and instance types as EC2 does (moto's
// MOTO_ENABLE_AMI_VALIDATION and MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION),
// so a launch of an image it does not know fails; ImageID is one it knows.
// Emulated instances never boot: they are "running" at once and run
// nothing, user data included.
//
// Proxy puts a fault-injecting reverse proxy in front of a server: the
// next N calls of an action answer an EC2 error (RequestLimitExceeded,
// InsufficientInstanceCapacity, ...), and a hook may act on a call's
// answer. A missing server binary is a test failure that says to run
// `make moto`; tests never skip for it.
package mototest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/testservers/freeport"
	"github.com/goray-dev/goray/internal/testservers/testbin"
)

// EnvBinary names the environment variable that overrides where moto's
// server (moto_server) is.
const EnvBinary = "GORAY_MOTO_SERVER"

// Region is the region the tests use; moto serves any.
const Region = "us-east-1"

// ImageID is an AMI in moto's default set (an Ubuntu 14.04 image), which
// launches pass its image validation with.
const ImageID = "ami-1e749f67"

// InstanceType is an instance type moto knows.
const InstanceType = "t3.micro"

// AccessKey and SecretKey are the credentials the tests sign with: moto
// accepts any.
const (
	AccessKey = "mototest-access-key"
	SecretKey = "mototest-secret-key"
)

// startTimeout bounds a start.
const startTimeout = time.Minute

// Binary returns moto's server: $GORAY_MOTO_SERVER, else
// <module root>/.tools/moto/bin/moto_server. The error says how to install
// it.
func Binary() (string, error) {
	return testbin.Find(testbin.Spec{What: "the moto server", Env: EnvBinary, Tools: "moto/bin/moto_server",
		Install: "run `make moto` in the module root (it installs the pinned moto into .tools/moto)"})
}

// Server is a running moto server of a test.
type Server struct {
	// Endpoint is the server's URL, http://127.0.0.1:<port>: what an AWS
	// SDK's endpoint setting takes.
	Endpoint string
	// Dir is the server's working, home and temp directory; its output
	// goes to Dir/moto.log.
	Dir string

	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a moto server, waits until it answers and kills it when
// the test ends. A missing binary fails t with how to install it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("mototest: %v", err)
	}
	dir, err := os.MkdirTemp("", "moto")
	if err != nil {
		t.Fatalf("mototest: %v", err)
	}
	s := &Server{Dir: dir}
	t.Cleanup(func() {
		s.Stop()
		_ = os.RemoveAll(dir)
	})
	// The server may lose the race for its port; freeport.Start then
	// tries another.
	if err := freeport.Start(1, nil, func(ports []int) error { return s.start(bin, ports[0]) }); err != nil {
		t.Fatalf("mototest: %v", err)
	}
	return s
}

func (s *Server) start(bin string, port int) error {
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(filepath.Join(s.Dir, "moto.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(cleanEnv(),
		"HOME="+s.Dir, "TMPDIR="+s.Dir,
		"MOTO_ENABLE_AMI_VALIDATION=true",
		"MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION=true",
	)
	// Its own process group (killed whole), killed when this process dies
	// however it dies (spawn.Start makes Pdeathsig reliable).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(startTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			s.cmd = nil
			log, _ := os.ReadFile(filepath.Join(s.Dir, "moto.log"))
			return fmt.Errorf("the moto server at %s exited at start: %s", s.Endpoint, lastLines(string(log), 5))
		default:
		}
		if resp, err := client.Get(s.Endpoint + "/moto-api/data.json"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	s.Stop()
	return fmt.Errorf("the moto server at %s did not answer within %s", s.Endpoint, startTimeout)
}

// cleanEnv is this process's environment without AWS_* and MOTO_*
// variables, so the caller's AWS settings cannot reach the server.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "MOTO_") {
			env = append(env, kv)
		}
	}
	return env
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Pid returns the server's process id (0 once stopped).
func (s *Server) Pid() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop kills the server and waits for it; a second call does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Log returns what the server printed.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "moto.log"))
	return string(b)
}

// AWSConfig returns an AWS SDK config for the server at endpoint (the
// server's Endpoint, or a Proxy's URL in front of it): Region, the test
// credentials, and no retries (a test sees every answer).
func AWSConfig(endpoint string) aws.Config {
	return aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		BaseEndpoint: aws.String(endpoint),
		Retryer:      func() aws.Retryer { return aws.NopRetryer{} },
		HTTPClient:   &http.Client{Timeout: 30 * time.Second},
	}
}

// Reset drops everything the server holds (moto's /moto-api/reset).
func (s *Server) Reset(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Endpoint+"/moto-api/reset", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("moto reset: %s", resp.Status)
	}
	return nil
}
