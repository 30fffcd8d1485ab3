package minioserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goray-dev/goray/internal/spawn"
	"github.com/goray-dev/goray/internal/testservers/freeport"
	"github.com/goray-dev/goray/internal/testservers/testbin"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// EnvBinary names the environment variable that overrides where the MinIO
// server binary is.
const EnvBinary = "GORAY_MINIO"

// readyTimeout bounds how long a starting server may take to answer its
// health check.
const readyTimeout = 60 * time.Second

// Binary returns the path of the MinIO server binary: $GORAY_MINIO, else
// <module root>/.tools/minio (`make tools` installs it there). The error
// says how to get it.
func Binary() (string, error) {
	return testbin.Find(testbin.Spec{What: "the MinIO server binary", Env: EnvBinary, Tools: "minio",
		Install: "run `make tools` in the module root (it installs the pinned MinIO server into .tools)"})
}

// Options configures Start.
type Options struct {
	// Region is the server's region (MINIO_SITE_REGION); "" is us-east-1.
	Region string
}

// Server is a running MinIO server, listening on 127.0.0.1.
type Server struct {
	// Endpoint is host:port of the S3 API.
	Endpoint string
	// AccessKey and SecretKey are the root credentials (random per server).
	AccessKey, SecretKey string
	// Region is the server's region.
	Region string

	bin     string
	dataDir string
	logDir  string
	logPath string
	console string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts a MinIO server with a fresh data directory, free ports and
// random root credentials and waits until it answers and judges
// credentials (or ctx ends). Close it when done. A missing binary is an
// error that says to run `make tools`.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Region == "" {
		opts.Region = "us-east-1"
	}
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dataDir, err := os.MkdirTemp("", "gminio")
	if err != nil {
		return nil, err
	}
	logDir, err := os.MkdirTemp("", "gminiolog")
	if err != nil {
		_ = os.RemoveAll(dataDir)
		return nil, err
	}
	s := &Server{
		AccessKey: "goray-" + randHex(6),
		SecretKey: randHex(20),
		Region:    opts.Region,
		bin:       bin,
		dataDir:   dataDir,
		logDir:    logDir,
		logPath:   filepath.Join(logDir, "minio.log"),
	}
	// The server may lose the race for its ports ("Specified port is
	// already in use"); freeport.Start then tries new ones.
	err = freeport.Start(2, nil, func(ports []int) error {
		s.Endpoint = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		s.console = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
		return s.start(ctx)
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close kills the server and removes its data and log directories.
func (s *Server) Close() {
	s.Stop()
	_ = os.RemoveAll(s.dataDir)
	_ = os.RemoveAll(s.logDir)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// start runs the server process and waits until it is ready.
func (s *Server) start(ctx context.Context) error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "server", s.dataDir, "--address", s.Endpoint, "--console-address", s.console)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey,
		"MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_SITE_REGION="+s.Region,
		"MINIO_UPDATE=off",
		"MINIO_BROWSER=off",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with this process, even if that is killed (and not
	// before: see package spawn).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := spawn.Start(cmd); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	if err := s.waitReady(ctx, exited); err != nil {
		s.Stop()
		return fmt.Errorf("%w\nMinIO log (%s):\n%s", err, s.logPath, s.LogTail())
	}
	return nil
}

// waitReady polls the liveness endpoint until the server answers and
// judges credentials, the process exits, readyTimeout passes or ctx ends.
func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	url := "http://" + s.Endpoint + "/minio/health/live"
	client := &http.Client{Timeout: time.Second}
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if err = s.iamReady(ctx); err == nil {
					return nil
				}
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("the MinIO server exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the MinIO server at %s was not ready within %v (last: %v)", s.Endpoint, readyTimeout, err)
		}
		select { // polling interval
		case <-time.After(25 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("waiting for the MinIO server at %s: %w", s.Endpoint, ctx.Err())
		}
	}
}

// iamReady reports whether the server judges credentials yet: a live
// server answers requests with unknown keys "IAM sub-system not initialized"
// for a while after it starts, which tests of wrong credentials must not see.
func (s *Server) iamReady(ctx context.Context) error {
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4("goray-readiness-probe", "goray-readiness-probe", "")})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = c.ListBuckets(ctx)
	if err == nil {
		return nil
	}
	if code := minio.ToErrorResponse(err).Code; code == "InvalidAccessKeyId" || code == "AccessDenied" || code == "SignatureDoesNotMatch" {
		return nil // credentials are judged
	}
	return err
}

// LogTail returns the end of the server's log.
func (s *Server) LogTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// Stop kills the server (SIGKILL, as a crash or a lost machine would) and
// waits until it has exited. Its data stays for Restart. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart stops the server if it runs and starts it again with the same
// data directory, address and credentials, and waits until it is ready.
func (s *Server) Restart(ctx context.Context) error {
	s.Stop()
	if err := s.start(ctx); err != nil {
		return fmt.Errorf("restarting: %w", err)
	}
	return nil
}

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Pid returns the server's process id (0 when stopped).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Client returns a minio-go client of the server with the root
// credentials.
func (s *Server) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: s.Region,
	})
}

// CreateBucket creates a bucket.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		return fmt.Errorf("creating bucket %q: %w", name, err)
	}
	return nil
}
