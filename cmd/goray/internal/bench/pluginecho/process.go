package pluginecho

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// serverEnv names the unix socket a process started by StartServer serves
// the bare echo service on.
const serverEnv = "GORAY_BENCH_GRPC_ECHO"

// readyLine is what such a process writes on stdout once it listens.
const readyLine = "listening"

// maybeServeBare serves the bare echo service (a default grpc.Server, no
// go-plugin) on the socket named by serverEnv and exits the process when
// its stdin reaches end of file, so it goes with its parent, also when
// the parent is killed. It returns at once when the variable is unset.
func maybeServeBare() {
	path := os.Getenv(serverEnv)
	if path == "" {
		return
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pluginecho: %v\n", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	Register(srv)
	go func() { _ = srv.Serve(lis) }()
	fmt.Println(readyLine)
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Stop()
	os.Exit(0)
}

// Server is a bare echo server running in another process, so a round
// trip to it crosses processes as a call between two core workers does.
type Server struct {
	*Client
	cc    *grpc.ClientConn
	cmd   *exec.Cmd
	stdin io.Closer
	dir   string
}

// StartServer starts exe (a binary whose main calls MaybeServe) as a bare
// gRPC echo server on a unix socket in a new temporary directory and
// connects to it with default options. ctx bounds the start-up.
func StartServer(ctx context.Context, exe string) (*Server, error) {
	dir, err := os.MkdirTemp("", "gbe")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "s")
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serverEnv+"="+sock)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pluginecho: starting %s: %w", exe, err)
	}
	s := &Server{cmd: cmd, stdin: stdin, dir: dir}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != readyLine {
			err = fmt.Errorf("unexpected first line %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		s.Close()
		if errors.Is(err, io.EOF) {
			err = errors.New("it exited before listening (does its main call MaybeServe?)")
		}
		return nil, fmt.Errorf("pluginecho: starting %s as an echo server: %w", exe, err)
	}
	s.cc, err = grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Client = NewClient(s.cc)
	return s, nil
}

// Close closes the connection, stops the server process (it exits when
// its stdin closes; it is killed if it has not after 10 s) and removes its
// directory.
func (s *Server) Close() {
	if s.cc != nil {
		s.cc.Close()
	}
	s.stdin.Close()
	exited := make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-exited
	}
	os.RemoveAll(s.dir)
}
