package rpc

import (
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Keepalive pings on the connections between core workers (a driver or
// worker to another's process, and to other nodes' raylets): when a peer
// sends nothing for Time, the client sends an HTTP/2 PING, and when no
// acknowledgement comes within Timeout it closes the connection, failing
// every call and stream on it. So a peer that went silent while its TCP
// connection stays open (its process or node frozen, the network between
// cut without a reset) is found without the GCS's failure detector, as
// Ray's core worker connections do with grpc_keepalive_time_ms and
// grpc_keepalive_timeout_ms.
type Keepalive struct {
	Time    time.Duration
	Timeout time.Duration
}

// DefaultKeepalive is Ray's default (grpc_keepalive_time_ms 10000,
// grpc_keepalive_timeout_ms 20000): a silent peer is found within about
// 30 s.
var DefaultKeepalive = Keepalive{Time: 10 * time.Second, Timeout: 20 * time.Second}

// The variables that set a process's keepalive (a Go duration, such as
// "15s"): a node passes its environment to its workers, so setting them
// where a node starts sets them for its workers too.
const (
	EnvKeepaliveTime    = "GORAY_GRPC_KEEPALIVE_TIME"
	EnvKeepaliveTimeout = "GORAY_GRPC_KEEPALIVE_TIMEOUT"
)

// MinKeepaliveTime is the shortest Time gRPC allows a client (it raises
// a shorter one to this).
const MinKeepaliveTime = 10 * time.Second

// keepaliveEnforcement is the least time a server lets pass between a
// client's pings: below every client's Time (at least MinKeepaliveTime),
// so no server refuses a goray client's pings (a GOAWAY with
// too_many_pings, which would close the connection). gRPC's default is 5
// minutes.
var keepaliveEnforcement = keepalive.EnforcementPolicy{MinTime: MinKeepaliveTime / 2, PermitWithoutStream: true}

// KeepaliveError says a keepalive variable holds a bad value.
type KeepaliveError struct {
	Var   string
	Value string
	Why   string
}

func (e *KeepaliveError) Error() string {
	return fmt.Sprintf("goray: $%s=%q: %s", e.Var, e.Value, e.Why)
}

// KeepaliveFromEnv returns DefaultKeepalive with what EnvKeepaliveTime
// and EnvKeepaliveTimeout set; a value that is not a duration, a time
// under MinKeepaliveTime or a timeout that is not positive is a
// *KeepaliveError naming the variable.
func KeepaliveFromEnv() (Keepalive, error) {
	return keepaliveFrom(os.Getenv)
}

func keepaliveFrom(getenv func(string) string) (Keepalive, error) {
	k := DefaultKeepalive
	for _, v := range []struct {
		name string
		dst  *time.Duration
		min  time.Duration
	}{{EnvKeepaliveTime, &k.Time, MinKeepaliveTime}, {EnvKeepaliveTimeout, &k.Timeout, time.Millisecond}} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return Keepalive{}, &KeepaliveError{Var: v.name, Value: s, Why: "not a duration (such as \"20s\")"}
		}
		if d < v.min {
			return Keepalive{}, &KeepaliveError{Var: v.name, Value: s, Why: fmt.Sprintf("must be at least %v", v.min)}
		}
		*v.dst = d
	}
	return k, nil
}

// DialOptions are the client side of k (the zero Keepalive:
// DefaultKeepalive). Pings are sent only while the connection has calls
// or streams open: an idle connection has nothing to lose.
func (k Keepalive) DialOptions() []grpc.DialOption {
	if k == (Keepalive{}) {
		k = DefaultKeepalive
	}
	return []grpc.DialOption{grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: k.Time, Timeout: k.Timeout})}
}
