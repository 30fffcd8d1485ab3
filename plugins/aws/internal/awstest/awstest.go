// Package awstest is what the AWS provider's tests share beyond
// sdk/provider/providertest/headtest (the head, the leak checks): a
// stand-in for the EC2 instance metadata service (IMDSv2) and a file
// server, so that an instance's user data can run on this machine. The
// EC2 API itself is moto's (internal/testservers/mototest, which the
// tests import).
package awstest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// IMDS is a stand-in for the EC2 instance metadata service, IMDSv2 only:
// GET needs the token a PUT of /latest/api/token gave.
type IMDS struct {
	// URL is where it listens, http://127.0.0.1:<port>.
	URL string

	mu         sync.Mutex
	instanceID string
	ip         string
	plainGets  int
}

// StartIMDS starts an IMDS that says the instance is instanceID with
// private IP ip; it stops when the test ends.
func StartIMDS(t testing.TB, instanceID, ip string) *IMDS {
	t.Helper()
	m := &IMDS{instanceID: instanceID, ip: ip}
	const token = "awstest-imds-token"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
				http.Error(w, "no ttl", http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte(token))
			return
		case r.Method != http.MethodGet:
			http.Error(w, "method", http.StatusMethodNotAllowed)
			return
		case r.Header.Get("X-aws-ec2-metadata-token") != token:
			m.mu.Lock()
			m.plainGets++
			m.mu.Unlock()
			http.Error(w, "IMDSv2 only", http.StatusUnauthorized)
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		switch r.URL.Path {
		case "/latest/meta-data/instance-id":
			_, _ = w.Write([]byte(m.instanceID))
		case "/latest/meta-data/local-ipv4":
			_, _ = w.Write([]byte(m.ip))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

// PlainGets returns how many GETs came without an IMDSv2 token.
func (m *IMDS) PlainGets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plainGets
}

// FileServer serves one file over HTTP, counting the downloads.
type FileServer struct {
	// URL is the file's URL.
	URL string

	mu    sync.Mutex
	count int
}

// ServeFile serves the file at path as URL/name until the test ends.
func ServeFile(t testing.TB, path, name string) *FileServer {
	t.Helper()
	f := &FileServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/"+name {
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		f.count++
		f.mu.Unlock()
		http.ServeFile(w, r, path)
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL + "/" + name
	return f
}

// Downloads returns how many times the file was asked for.
func (f *FileServer) Downloads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}
