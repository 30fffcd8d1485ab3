package auth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxTokenLen bounds a token read from a file or the environment.
const maxTokenLen = 4096

// GenerateToken returns a new random cluster token (256 bits, hex).
func GenerateToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("goray auth: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// DefaultTokenPath is where `goray start --head` keeps the token when
// nothing else names a place: ~/.goray/auth_token.
func DefaultTokenPath() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".goray", "auth_token")
}

// TokenPath is the token file this process uses: $GORAY_AUTH_TOKEN_PATH,
// else DefaultTokenPath.
func TokenPath() string {
	if p := os.Getenv(EnvTokenPath); p != "" {
		return p
	}
	return DefaultTokenPath()
}

// FindToken returns the token a client presents: $GORAY_AUTH_TOKEN, else the
// content of TokenPath (a missing default file is no error: the token is
// then ""). from says where it was found, for messages.
func FindToken() (token, from string, err error) {
	if t := strings.TrimSpace(os.Getenv(EnvToken)); t != "" {
		if err := checkTokenText(t); err != nil {
			return "", "", fmt.Errorf("$%s: %w", EnvToken, err)
		}
		return t, "$" + EnvToken, nil
	}
	p := TokenPath()
	if p == "" {
		return "", "", nil
	}
	t, err := ReadTokenFile(p)
	if errors.Is(err, fs.ErrNotExist) && os.Getenv(EnvTokenPath) == "" {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	return t, p, nil
}

// ReadTokenFile reads a token file. It refuses a file that other users can
// read or write (as ssh does a private key): the token runs code on the
// cluster.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("goray auth: reading the token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("goray auth: reading the token file: %w", err)
	}
	if st.IsDir() {
		return "", fmt.Errorf("goray auth: token file %s is a directory", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", &InsecureFileError{Path: path, Mode: perm}
	}
	// Room for the token and a line ending or some white space.
	b, err := io.ReadAll(io.LimitReader(f, maxTokenLen+64))
	if err != nil {
		return "", fmt.Errorf("goray auth: reading the token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) > maxTokenLen || len(b) == maxTokenLen+64 {
		return "", fmt.Errorf("goray auth: token file %s is larger than %d bytes", path, maxTokenLen)
	}
	if t == "" {
		return "", fmt.Errorf("goray auth: token file %s is empty", path)
	}
	if err := checkTokenText(t); err != nil {
		return "", fmt.Errorf("goray auth: token file %s: %w", path, err)
	}
	return t, nil
}

// LoadOrCreateToken reads the token file at path, or creates it with a new
// token (the file 0600, missing directories 0700). created says which.
// Two processes creating it at once agree on one token.
func LoadOrCreateToken(path string) (token string, created bool, err error) {
	t, err := ReadTokenFile(path)
	if err == nil {
		return t, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("goray auth: creating the token file's directory: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".auth_token-*")
	if err != nil {
		return "", false, fmt.Errorf("goray auth: creating the token file: %w", err)
	}
	defer os.Remove(tmp.Name())
	t = GenerateToken()
	if _, err := tmp.WriteString(t + "\n"); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("goray auth: writing the token file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", false, fmt.Errorf("goray auth: writing the token file: %w", err)
	}
	// Link, not rename: whoever links first wins, the other reads it.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			t, err := ReadTokenFile(path)
			return t, false, err
		}
		return "", false, fmt.Errorf("goray auth: creating the token file: %w", err)
	}
	return t, true, nil
}

// checkTokenText refuses tokens that cannot travel in a header.
func checkTokenText(t string) error {
	if len(t) > maxTokenLen {
		return fmt.Errorf("the token is longer than %d bytes", maxTokenLen)
	}
	for _, r := range t {
		if r <= ' ' || r > '~' {
			return errors.New("the token must be printable ASCII without spaces")
		}
	}
	return nil
}

// InsecureFileError says a secret file is readable or writable by others.
type InsecureFileError struct {
	Path string
	Mode fs.FileMode
}

func (e *InsecureFileError) Error() string {
	return fmt.Sprintf("goray auth: %s has permissions %#o: other users could read or replace this secret (the cluster token or a TLS key); run `chmod 600 %s`", e.Path, uint32(e.Mode), e.Path)
}
