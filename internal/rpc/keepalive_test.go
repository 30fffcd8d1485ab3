package rpc

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/goray-dev/goray/internal/waitfor"
)

func TestKeepaliveFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Keepalive
		wantVar string // the variable a *KeepaliveError names ("": no error)
	}{
		{name: "defaults", want: DefaultKeepalive},
		{name: "both set", env: map[string]string{EnvKeepaliveTime: "15s", EnvKeepaliveTimeout: "2s"}, want: Keepalive{Time: 15 * time.Second, Timeout: 2 * time.Second}},
		{name: "timeout only", env: map[string]string{EnvKeepaliveTimeout: "500ms"}, want: Keepalive{Time: DefaultKeepalive.Time, Timeout: 500 * time.Millisecond}},
		{name: "not a duration", env: map[string]string{EnvKeepaliveTime: "ten"}, wantVar: EnvKeepaliveTime},
		{name: "time under gRPC's minimum", env: map[string]string{EnvKeepaliveTime: "1s"}, wantVar: EnvKeepaliveTime},
		{name: "zero timeout", env: map[string]string{EnvKeepaliveTimeout: "0s"}, wantVar: EnvKeepaliveTimeout},
		{name: "negative timeout", env: map[string]string{EnvKeepaliveTimeout: "-3s"}, wantVar: EnvKeepaliveTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := keepaliveFrom(func(k string) string { return tt.env[k] })
			if tt.wantVar != "" {
				var ke *KeepaliveError
				if !errors.As(err, &ke) || ke.Var != tt.wantVar {
					t.Fatalf("got %v, %v; want a KeepaliveError naming %s", got, err, tt.wantVar)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// stallProxy forwards TCP connections to a server until stall: from then
// on it forwards nothing and closes nothing, like a network that went
// silent under open connections. It counts the HTTP/2 PING frames the
// clients sent through it (each is a write of its own: 17 bytes).
type stallProxy struct {
	lis    net.Listener
	target string

	mu      sync.Mutex
	stalled chan struct{}
	done    chan struct{}
	pings   int
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{lis: lis, target: target, stalled: make(chan struct{}), done: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c, true)
		go p.pipe(c, s, false)
	}
}

// pipe copies from src to dst until stalled; then it holds what it read
// until the proxy closes.
func (p *stallProxy) pipe(dst, src net.Conn, fromClient bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.stalled:
				<-p.done
				return
			default:
			}
			if fromClient && n == 17 && buf[3] == 0x6 { // a PING frame
				p.mu.Lock()
				p.pings++
				p.mu.Unlock()
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() { close(p.stalled) }

func (p *stallProxy) pingCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pings
}

func (p *stallProxy) close() {
	_ = p.lis.Close()
	close(p.done)
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// TestKeepaliveFindsASilentPeer: a stream through a connection whose
// peer goes silent without closing it (the proxy stops forwarding) fails
// with Unavailable once a keepalive ping goes unanswered; while the peer
// answers, the pings keep the stream open, the server accepting them as
// often as clients send them (no GOAWAY too_many_pings, which gRPC's
// default enforcement sends after a few pings on an idle stream).
func TestKeepaliveFindsASilentPeer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(nil)...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	p := startStallProxy(t, lis.Addr().String())

	ka := Keepalive{Time: MinKeepaliveTime, Timeout: time.Second}
	cc, err := Dial(p.lis.Addr().String(), nil, ka.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A Watch stream sends its first status and then nothing: an idle
	// stream, as a lease's stream while its task runs.
	st, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		ended <- err
	}()
	// gRPC's default enforcement (5 minutes between pings) closes the
	// connection on the client's fourth ping on an idle stream.
	const pings = 5
	waitfor.Cond(t, 10*time.Minute, "the client to send keepalive pings", func() bool {
		select {
		case err := <-ended:
			t.Fatalf("the stream ended after %d pings through a peer that answers: %v", p.pingCount(), err)
		default:
		}
		return p.pingCount() >= pings
	})
	p.stall()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the stream through a silent peer ended with %v, want Unavailable", err)
		}
	case <-time.After(10 * time.Minute):
		t.Fatal("the stream through a silent peer never ended")
	}
}
