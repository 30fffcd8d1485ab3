// Command testworker is a minimal goray worker used by the raylet's tests.
// It reads the GORAY_* environment set by the raylet, serves a CoreWorker
// gRPC server (only Exit is implemented) on a unix socket in the session
// directory, registers over WorkerSession and exits when the stream closes,
// on an EXIT command or on the Exit RPC.
//
// It prints "testworker: WORKER_DIED <hex id>" on stdout for every
// WORKER_DIED command it receives.
//
// TESTWORKER_MODE changes its behaviour: "noregister" never connects to the
// raylet; "crash" exits with status 3 at once; "owner" reports
// owns_objects=true right after registering.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/goray-dev/goray/internal/ids"
	gorayv1 "github.com/goray-dev/goray/internal/proto/gorayv1"
	"github.com/goray-dev/goray/raylet"
)

type coreWorker struct {
	gorayv1.UnimplementedCoreWorkerServer
	exit chan string
}

func (c *coreWorker) Exit(ctx context.Context, req *gorayv1.ExitRequest) (*gorayv1.ExitReply, error) {
	select {
	case c.exit <- "Exit RPC: " + req.GetReason():
	default:
	}
	return &gorayv1.ExitReply{}, nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "testworker: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	if os.Getenv(raylet.EnvWorker) != "1" {
		fail("%s is not set: not started by a raylet", raylet.EnvWorker)
	}
	switch os.Getenv("TESTWORKER_MODE") {
	case "noregister":
		fmt.Println("testworker: not registering")
		select {} // until killed
	case "crash":
		fmt.Fprintln(os.Stderr, "testworker: crashing on purpose")
		os.Exit(3)
	}
	wid, err := ids.Parse(os.Getenv(raylet.EnvWorkerID))
	if err != nil {
		fail("%s: %v", raylet.EnvWorkerID, err)
	}
	nid, err := ids.Parse(os.Getenv(raylet.EnvNodeID))
	if err != nil {
		fail("%s: %v", raylet.EnvNodeID, err)
	}
	sock := filepath.Join(os.Getenv(raylet.EnvSessionDir), "sockets", "tw-"+wid.Short()+".sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fail("listen: %v", err)
	}
	defer os.Remove(sock)
	cw := &coreWorker{exit: make(chan string, 1)}
	srv := grpc.NewServer()
	gorayv1.RegisterCoreWorkerServer(srv, cw)
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient("unix://"+os.Getenv(raylet.EnvRayletSocket),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fail("dial raylet: %v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := gorayv1.NewRayletClient(conn).WorkerSession(ctx)
	if err != nil {
		fail("worker session: %v", err)
	}
	if err := stream.Send(&gorayv1.WorkerMessage{
		WorkerId: wid.Bytes(),
		Address:  &gorayv1.Address{UnixPath: sock, WorkerId: wid.Bytes(), NodeId: nid.Bytes()},
		Pid:      int32(os.Getpid()),
	}); err != nil {
		fail("register: %v", err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetKind() != gorayv1.RayletCommand_REGISTERED {
		fail("registration reply: %v %v", first, err)
	}
	fmt.Printf("testworker registered job=%x log_level=%s\n", first.GetJobId(), os.Getenv(raylet.EnvLogLevel))
	if os.Getenv("TESTWORKER_MODE") == "owner" {
		if err := stream.Send(&gorayv1.WorkerMessage{WorkerId: wid.Bytes(), OwnsObjects: true}); err != nil {
			fail("reporting owns_objects: %v", err)
		}
		fmt.Println("testworker: reported owns_objects")
	}

	go func() {
		for {
			c, err := stream.Recv()
			if err != nil {
				cw.exit <- "stream closed: " + err.Error()
				return
			}
			switch c.GetKind() {
			case gorayv1.RayletCommand_EXIT:
				cw.exit <- "EXIT: " + c.GetReason()
				return
			case gorayv1.RayletCommand_WORKER_DIED:
				fmt.Printf("testworker: WORKER_DIED %x\n", c.GetWorkerId())
			}
		}
	}()
	reason := <-cw.exit
	fmt.Fprintln(os.Stderr, "testworker exiting:", reason)
}
