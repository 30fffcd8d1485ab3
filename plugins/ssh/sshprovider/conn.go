package sshprovider

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ErrHostKey is matched (errors.Is) by every *HostKeyError.
var ErrHostKey = errors.New("host key refused")

// HostKeyError says a host's key is not the one its known_hosts file
// lists, or that the file does not list the host: the provider refuses to
// log in there.
type HostKeyError struct {
	// Host is the host, host:port.
	Host string
	// File is the known_hosts file.
	File string
	// Fingerprint is the SHA256 fingerprint of the key the host offered.
	Fingerprint string
	// KeyType is the type of that key (ssh-ed25519, ...).
	KeyType string
	// Lines are the lines of File that list other keys for the host
	// (none: the host is not in the file).
	Lines []int
	// Revoked says the file marks the key @revoked.
	Revoked bool
}

// Error says what is wrong and what to do.
func (e *HostKeyError) Error() string {
	switch {
	case e.Revoked:
		return fmt.Sprintf("the host key of %s (%s %s) is marked @revoked in known_hosts file %s: refusing to connect", e.Host, e.KeyType, e.Fingerprint, e.File)
	case len(e.Lines) == 0:
		return fmt.Sprintf("host %s is not in known_hosts file %s: refusing to connect; check its key (%s %s) and add it to the file (ssh-keyscan prints the line)",
			e.Host, e.File, e.KeyType, e.Fingerprint)
	}
	lines := make([]string, len(e.Lines))
	for i, l := range e.Lines {
		lines[i] = fmt.Sprint(l)
	}
	return fmt.Sprintf("the host key of %s (%s %s) does not match known_hosts file %s (line %s lists another key for it): refusing to connect; if the host's key really changed, replace that line",
		e.Host, e.KeyType, e.Fingerprint, e.File, strings.Join(lines, ", "))
}

// Is makes errors.Is(err, ErrHostKey) hold.
func (e *HostKeyError) Is(target error) bool { return target == ErrHostKey }

// HostError is a failure to reach or use a host: it names the host.
type HostError struct {
	// Host is the host, host:port.
	Host string
	// Op says what failed ("connecting", "uploading the goray binary", ...).
	Op string
	// Err is the cause.
	Err error
}

// Error names the host and what failed.
func (e *HostError) Error() string { return fmt.Sprintf("host %s: %s: %v", e.Host, e.Op, e.Err) }

// Unwrap returns the cause.
func (e *HostError) Unwrap() error { return e.Err }

// knownHostsCallback reads a known_hosts file.
func knownHostsCallback(file string) (ssh.HostKeyCallback, error) {
	cb, err := knownhosts.New(file)
	if err != nil {
		return nil, fmt.Errorf("known_hosts_file %s: %w", file, err)
	}
	return cb, nil
}

// probeKey is a key no host has: checking it against known_hosts reveals
// the keys the file lists for a host.
var probeKey = func() ssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		panic(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return k
}()

// hostKeyAlgorithms returns the host key algorithms to ask hostport (at
// addr) for: those of the keys the known_hosts file lists for it, so that
// a host with several keys offers one the file knows (nil when it lists
// none).
func hostKeyAlgorithms(cb ssh.HostKeyCallback, hostport string, addr net.Addr) []string {
	var ke *knownhosts.KeyError
	if !errors.As(cb(hostport, addr, probeKey), &ke) {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, x := range a {
			if !seen[x] {
				seen[x] = true
				out = append(out, x)
			}
		}
	}
	for _, k := range ke.Want {
		switch t := k.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return out
}

// checkHostKey wraps a known_hosts callback so its refusals are
// *HostKeyError naming the host and the file.
func checkHostKey(cb ssh.HostKeyCallback, file, hostport string) ssh.HostKeyCallback {
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := cb(hostname, remote, key)
		if err == nil {
			return nil
		}
		he := &HostKeyError{Host: hostport, File: file, Fingerprint: ssh.FingerprintSHA256(key), KeyType: key.Type()}
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case errors.As(err, &ke):
			for _, w := range ke.Want {
				he.Lines = append(he.Lines, w.Line)
			}
		case errors.As(err, &re):
			he.Revoked = true
		default:
			return err
		}
		return he
	}
}

// newAuth returns how connections log in: with the private key file, else
// with the keys of the ssh agent at $SSH_AUTH_SOCK.
func newAuth(keyFile string) (authSource, error) {
	if keyFile != "" {
		p, err := expandHome(keyFile)
		if err != nil {
			return nil, fmt.Errorf("private_key_file: %w", err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("private_key_file: %w", err)
		}
		signer, err := ssh.ParsePrivateKey(b)
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, fmt.Errorf("private_key_file %s is encrypted: load it into an ssh agent (ssh-add) and leave private_key_file out, so the provider uses the agent", p)
		}
		if err != nil {
			return nil, fmt.Errorf("private_key_file %s: %w", p, err)
		}
		return func() ([]ssh.AuthMethod, func(), error) {
			return []ssh.AuthMethod{ssh.PublicKeys(signer)}, func() {}, nil
		}, nil
	}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, errors.New("no private_key_file given and no ssh agent ($SSH_AUTH_SOCK is not set): set private_key_file")
	}
	return func() ([]ssh.AuthMethod, func(), error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return nil, nil, fmt.Errorf("the ssh agent at $SSH_AUTH_SOCK (%s): %w", sock, err)
		}
		return []ssh.AuthMethod{ssh.PublicKeysCallback(agent.NewClient(c).Signers)}, func() { c.Close() }, nil
	}, nil
}

// redialAfter is how long a scan waits before it tries again a host it
// could not reach (a launch or a terminate tries at once).
const redialAfter = 10 * time.Second

// conns keeps one SSH connection per host, opened on first use and again
// after it broke.
type conns struct {
	mu sync.Mutex
	m  map[string]*hostConn
}

// hostConn is the connection to one host.
type hostConn struct {
	// dial serialises dialing the host.
	dial chan struct{}

	mu      sync.Mutex
	client  *ssh.Client
	ip      string
	lastErr error
	lastAt  time.Time
}

func (c *conns) get(key string) *hostConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*hostConn{}
	}
	hc, ok := c.m[key]
	if !ok {
		hc = &hostConn{dial: make(chan struct{}, 1)}
		c.m[key] = hc
	}
	return hc
}

// closeAll closes every connection.
func (c *conns) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, hc := range c.m {
		hc.mu.Lock()
		if hc.client != nil {
			_ = hc.client.Close()
			hc.client = nil
		}
		hc.mu.Unlock()
	}
}

// client returns the host's connection, dialing it when there is none.
// With cached, a host that failed less than redialAfter ago fails again
// at once with its last error.
func (c *conns) client(ctx context.Context, s *settings, h *host, cached bool) (*ssh.Client, string, error) {
	hc := c.get(h.key)
	select {
	case hc.dial <- struct{}{}:
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
	defer func() { <-hc.dial }()
	hc.mu.Lock()
	if hc.client != nil {
		cl, ip := hc.client, hc.ip
		hc.mu.Unlock()
		return cl, ip, nil
	}
	if cached && hc.lastErr != nil && time.Since(hc.lastAt) < redialAfter {
		err := hc.lastErr
		hc.mu.Unlock()
		return nil, "", err
	}
	hc.mu.Unlock()
	cl, ip, err := dial(ctx, s, h)
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if ctx.Err() == nil {
		hc.lastErr, hc.lastAt = err, time.Now()
	}
	if err != nil {
		return nil, "", err
	}
	hc.client, hc.ip = cl, ip
	return cl, ip, nil
}

// drop forgets the host's connection cl (it broke).
func (c *conns) drop(key string, cl *ssh.Client) {
	hc := c.get(key)
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.client == cl {
		_ = cl.Close()
		hc.client = nil
	}
}

// dial connects and logs in to h, checking its key against known_hosts.
// It returns the client and the host's IP address as this machine reaches
// it.
func dial(ctx context.Context, s *settings, h *host) (*ssh.Client, string, error) {
	fail := func(err error) (*ssh.Client, string, error) {
		return nil, "", &HostError{Host: h.key, Op: "connecting", Err: err}
	}
	cb, err := knownHostsCallback(s.knownHosts)
	if err != nil {
		return fail(err)
	}
	methods, release, err := s.auth()
	if err != nil {
		return fail(err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	d := net.Dialer{}
	conn, err := d.DialContext(ctx, "tcp", h.key)
	if err != nil {
		return fail(err)
	}
	cfg := &ssh.ClientConfig{
		User:              s.user,
		Auth:              methods,
		HostKeyCallback:   checkHostKey(cb, s.knownHosts, h.key),
		HostKeyAlgorithms: hostKeyAlgorithms(cb, h.key, conn.RemoteAddr()),
		ClientVersion:     "SSH-2.0-goray-provider-ssh",
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	c, chans, reqs, err := ssh.NewClientConn(conn, h.key, cfg)
	stop()
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (after %v)", ctx.Err(), s.timeout)
		}
		var he *HostKeyError
		if errors.As(err, &he) {
			return nil, "", he
		}
		return fail(err)
	}
	_ = conn.SetDeadline(time.Time{})
	ip := h.name
	if ta, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		ip = ta.IP.String()
	}
	return ssh.NewClient(c, chans, reqs), ip, nil
}

// outputLimit bounds how much of a command's output is kept (its end).
const outputLimit = 64 << 10

// tailBuffer keeps the last outputLimit bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

// Write keeps p, dropping the oldest bytes past outputLimit.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - outputLimit; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns what was kept.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// ExitError is a remote command that ran and failed.
type ExitError struct {
	// Status is its exit status (-1 when it was killed by a signal).
	Status int
	// Output is the end of its output (stdout and stderr).
	Output string
}

// Error gives the status and the output's last lines.
func (e *ExitError) Error() string {
	out := lastLines(e.Output, 20)
	if out == "" {
		return fmt.Sprintf("exit status %d, no output", e.Status)
	}
	return fmt.Sprintf("exit status %d; its output ends:\n%s", e.Status, out)
}

// lastLines returns the last n lines of s, trimmed.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// run runs script with sh on host h, stdin from stdin (nil: none), and
// returns its standard output (its end). A failed script is an
// *ExitError with the end of its output (stdout and stderr); ctx ending
// closes the session. cached is as for conns.client.
func (c *conns) run(ctx context.Context, s *settings, h *host, script string, stdin io.Reader, cached bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	for attempt := 0; ; attempt++ {
		cl, _, err := c.client(ctx, s, h, cached)
		if err != nil {
			return "", err
		}
		out, broken, err := runOn(ctx, cl, script, stdin)
		if broken {
			c.drop(h.key, cl)
			if attempt == 0 && ctx.Err() == nil && stdin == nil {
				continue // a connection that broke while idle: once more on a new one
			}
			if err != nil {
				err = &HostError{Host: h.key, Op: "running a command", Err: err}
			}
		}
		return out, err
	}
}

// runOn runs script on cl; broken says the connection failed (rather
// than the script).
func runOn(ctx context.Context, cl *ssh.Client, script string, stdin io.Reader) (out string, broken bool, err error) {
	type opened struct {
		s   *ssh.Session
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := cl.NewSession()
		ch <- opened{s, err}
	}()
	var sess *ssh.Session
	select {
	case o := <-ch:
		if o.err != nil {
			return "", true, fmt.Errorf("opening a session: %w", o.err)
		}
		sess = o.s
	case <-ctx.Done():
		// The connection may be stuck: close it, which ends NewSession.
		_ = cl.Close()
		if o := <-ch; o.s != nil {
			o.s.Close()
		}
		return "", true, ctx.Err()
	}
	defer sess.Close()
	var stdout, all tailBuffer
	sess.Stdout, sess.Stderr = io.MultiWriter(&stdout, &all), &all
	if stdin != nil {
		sess.Stdin = stdin
	}
	if err := sess.Start(shellCommand(script)); err != nil {
		return "", true, fmt.Errorf("starting a command: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- sess.Wait() }()
	select {
	case err := <-done:
		var ee *ssh.ExitError
		var em *ssh.ExitMissingError
		switch {
		case err == nil:
			return stdout.String(), false, nil
		case errors.As(err, &ee):
			st := ee.ExitStatus()
			if ee.Signal() != "" {
				st = -1
			}
			return stdout.String(), false, &ExitError{Status: st, Output: all.String()}
		case errors.As(err, &em):
			return stdout.String(), false, &ExitError{Status: -1, Output: all.String()}
		default:
			return stdout.String(), true, err
		}
	case <-ctx.Done():
		_ = sess.Signal(ssh.SIGKILL)
		_ = sess.Close()
		<-done
		return stdout.String(), false, ctx.Err()
	}
}

// shellCommand is the command line that runs script with sh, whatever the
// user's login shell (as long as it quotes like a POSIX shell).
func shellCommand(script string) string {
	return "sh -c " + shellQuote(script) + " goray-provider-ssh"
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
