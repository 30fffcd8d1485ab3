// Package freeport finds loopback ports for the real servers tests start
// (MinIO, redis-server, Prometheus, moto, sshd), and retries a start that
// lost the race for them.
//
// A port found free is closed again before the server binds it, so another
// process on the machine may take it in between: `go test ./...` runs many
// packages at once, each listening on ports of its own. Start therefore
// calls the server's start again with new ports when it fails, Attempts
// times in all.
package freeport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
)

// Attempts is how many times Start tries a server's start, each time with
// new ports.
const Attempts = 5

// Ports returns n distinct ports that are free now on every one of ips (on
// 127.0.0.1 when ips is empty). The ports are closed again when Ports
// returns; the caller's server may lose them to another process (see
// Start).
func Ports(n int, ips ...string) ([]int, error) {
	if len(ips) == 0 {
		ips = []string{"127.0.0.1"}
	}
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 20*n {
			return nil, fmt.Errorf("freeport: no %d ports free on every one of %v", n, ips)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			return nil, fmt.Errorf("freeport: listening on %s: %w", ips[0], err)
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		free := true
		for _, ip := range ips[1:] {
			m, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			held = append(held, m)
		}
		if free {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// Start calls start with n new ports from Ports(n, ips...) until it
// returns nil, at most Attempts times, and returns the last error, saying
// how many attempts were made, when none succeeded. An error of Ports, or
// one of start that is a context's (context.Canceled or
// DeadlineExceeded), ends the attempts at once.
func Start(n int, ips []string, start func(ports []int) error) error {
	var last error
	for attempt := 1; attempt <= Attempts; attempt++ {
		ports, err := Ports(n, ips...)
		if err != nil {
			return err
		}
		last = start(ports)
		switch {
		case last == nil:
			return nil
		case errors.Is(last, context.Canceled), errors.Is(last, context.DeadlineExceeded):
			return last
		}
	}
	return fmt.Errorf("%w (the last of %d attempts, each on new ports)", last, Attempts)
}

// Refused returns a loopback port on ip (127.0.0.1 when empty) where a
// connection is refused for as long as the returned closer is not called:
// a TCP socket is bound to it and never listens, so no other process can
// take the port (a port found free and closed again may be taken by a
// server of another test, and a connection meant to be refused then
// reaches that server).
func Refused(ip string) (port int, closer func() error, err error) {
	if ip == "" {
		ip = "127.0.0.1"
	}
	addr := net.ParseIP(ip).To4()
	if addr == nil {
		return 0, nil, fmt.Errorf("freeport: Refused: %q is not an IPv4 address", ip)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("freeport: Refused: socket: %w", err)
	}
	sa := &syscall.SockaddrInet4{}
	copy(sa.Addr[:], addr)
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return 0, nil, fmt.Errorf("freeport: Refused: binding %s: %w", ip, err)
	}
	got, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return 0, nil, fmt.Errorf("freeport: Refused: %w", err)
	}
	return got.(*syscall.SockaddrInet4).Port, func() error { return syscall.Close(fd) }, nil
}

// ephemeral returns the kernel's ephemeral port range (its
// ip_local_port_range), or Linux's default when it cannot be read.
func ephemeral() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	var l, h int
	if n, _ := fmt.Sscan(string(b), &l, &h); n == 2 && l > 0 && h >= l {
		return l, h
	}
	return lo, hi
}

// Outside returns a port free now on ip (127.0.0.1 when empty) that lies
// outside the kernel's ephemeral range, picked at random from 10000 up to
// the start of that range (or from above it). The kernel hands ephemeral
// ports to every socket bound to port 0 and every outgoing connection, so
// a port found free there and closed is soon taken by a test beside the
// caller (a doc run's `goray start --head --port P` once found its P in
// use); a port outside it is only taken by another picker choosing the same
// one at random. The port is closed again when Outside returns.
func Outside(ip string) (int, error) {
	if ip == "" {
		ip = "127.0.0.1"
	}
	lo, hi := ephemeral()
	ranges := [][2]int{}
	if lo > 10000+100 {
		ranges = append(ranges, [2]int{10000, lo - 1})
	}
	if hi < 65535-100 {
		ranges = append(ranges, [2]int{hi + 1, 65535})
	}
	if len(ranges) == 0 {
		return 0, fmt.Errorf("freeport: the ephemeral range %d-%d leaves no ports outside it", lo, hi)
	}
	for range 200 {
		r := ranges[rand.IntN(len(ranges))]
		port := r[0] + rand.IntN(r[1]-r[0]+1)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		_ = l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free port outside the ephemeral range %d-%d on %s after 200 tries", lo, hi, ip)
}
