package freeport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestPorts(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
		ips  []string
	}{
		{"one on the default address", 1, nil},
		{"two distinct", 2, nil},
		{"free on several addresses", 3, []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ports, err := Ports(tc.n, tc.ips...)
			if err != nil {
				t.Fatal(err)
			}
			if len(ports) != tc.n {
				t.Fatalf("got %d ports, want %d", len(ports), tc.n)
			}
			ips := tc.ips
			if len(ips) == 0 {
				ips = []string{"127.0.0.1"}
			}
			seen := map[int]bool{}
			for _, p := range ports {
				if seen[p] {
					t.Fatalf("port %d given twice: %v", p, ports)
				}
				seen[p] = true
				for _, ip := range ips { // closed again, and free on each address
					l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
					if err != nil {
						t.Fatalf("port %d on %s: %v", p, ip, err)
					}
					defer l.Close()
				}
			}
		})
	}
}

func TestPortsBadAddress(t *testing.T) {
	_, err := Ports(1, "192.0.2.1") // TEST-NET-1: not an address of this machine
	if err == nil || !strings.Contains(err.Error(), "192.0.2.1") {
		t.Fatalf("err = %v, want one naming the address", err)
	}
}

// TestStartRetries has a server lose the race for its port: another
// listener takes the port before the first two starts bind it.
func TestStartRetries(t *testing.T) {
	var tried []int
	err := Start(1, nil, func(ports []int) error {
		tried = append(tried, ports[0])
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
		if err != nil {
			return err
		}
		defer l.Close()
		if len(tried) <= 2 { // another process took it first: this start cannot bind
			if _, err := net.Listen("tcp", l.Addr().String()); err != nil {
				return fmt.Errorf("binding %s: %w", l.Addr(), err)
			}
			t.Fatal("a port was bound twice")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tried) != 3 {
		t.Fatalf("start was called %d times (%v), want 3", len(tried), tried)
	}
}

func TestStartGivesUp(t *testing.T) {
	lost := errors.New("Specified port is already in use")
	for _, tc := range []struct {
		name      string
		err       error
		wantCalls int
	}{
		{"every attempt fails", lost, Attempts},
		{"a context's error ends the attempts", fmt.Errorf("waiting: %w", context.DeadlineExceeded), 1},
		{"so does a cancelled one", context.Canceled, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := Start(2, nil, func(ports []int) error {
				calls++
				if len(ports) != 2 || ports[0] == ports[1] {
					t.Errorf("ports %v, want 2 distinct", ports)
				}
				return tc.err
			})
			if !errors.Is(err, tc.err) {
				t.Errorf("err = %v, want it to wrap %v", err, tc.err)
			}
			if calls != tc.wantCalls {
				t.Errorf("start called %d times, want %d", calls, tc.wantCalls)
			}
			if tc.wantCalls == Attempts && !strings.Contains(err.Error(), strconv.Itoa(Attempts)+" attempts") {
				t.Errorf("err = %v, want it to say how many attempts were made", err)
			}
		})
	}
}

// TestRefused: a connection to the port Refused returns is refused, and no
// listener can take the port while it is held; once closed, it can.
func TestRefused(t *testing.T) {
	port, closer, err := Refused("")
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if c, err := net.Dial("tcp", addr); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialing the refused port %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatalf("a listener took the held port %s", addr)
	}
	if err := closer(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port %s, released, cannot be listened on: %v", addr, err)
	}
	l.Close()
	if _, _, err := Refused("::1"); err == nil {
		t.Fatal("Refused(\"::1\") succeeded; want an error naming the address")
	}
}

// TestOutside: the ports Outside returns lie outside the kernel's
// ephemeral range and can be bound.
func TestOutside(t *testing.T) {
	lo, hi := ephemeral()
	for range 50 {
		port, err := Outside("")
		if err != nil {
			t.Fatal(err)
		}
		if port >= lo && port <= hi || port < 10000 || port > 65535 {
			t.Fatalf("port %d: in the ephemeral range %d-%d or out of bounds", port, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d cannot be bound: %v", port, err)
		}
		l.Close()
	}
}
