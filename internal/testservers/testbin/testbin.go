// Package testbin finds the binaries of the real servers and programs that
// tests run (redis-server, prometheus, MinIO, moto, sshd, Chromium). It is
// test support code: a Spec says where a binary may be, and Find looks
// there in order and, when the binary is not found, returns an error that
// says how to install it.
package testbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Spec says where a binary may be. Find looks at Env, then Commands, then
// Tools, then Abs; the first binary found wins.
type Spec struct {
	// What names the binary in messages, e.g. "redis-server" or "the MinIO
	// server".
	What string
	// Env names the environment variable that overrides where the binary
	// is; when it is set, Find looks nowhere else.
	Env string
	// Commands are names looked up on $PATH, in order.
	Commands []string
	// Tools is a slash-separated path under <module root>/.tools, e.g.
	// "moto/bin/moto_server".
	Tools string
	// Abs is a fixed absolute path, e.g. "/usr/sbin/sshd".
	Abs string
	// Absolute, when set, says why the binary must be named by an absolute
	// path (e.g. "sshd re-executes itself"): Find then refuses a relative
	// $Env.
	Absolute string
	// Install says how to install the binary, e.g. "run `make redis` (it
	// installs Debian's redis-server package)"; the error of a binary not
	// found ends with it.
	Install string
}

// Find returns the path of the binary s describes: $Env when set (it must
// be an executable file), else the first of Commands on $PATH, else
// <module root>/.tools/Tools, else Abs, whichever is an executable file.
// The error names $Env when the override is wrong and otherwise says where
// Find looked and how to install the binary.
func Find(s Spec) (string, error) {
	if s.Env != "" {
		if p := os.Getenv(s.Env); p != "" {
			if s.Absolute != "" && !filepath.IsAbs(p) {
				return "", fmt.Errorf("%s named by $%s, %q, is not an absolute path (%s, so it needs one)", s.What, s.Env, p, s.Absolute)
			}
			if err := executable(p); err != nil {
				return "", fmt.Errorf("%s named by $%s: %w", s.What, s.Env, err)
			}
			return p, nil
		}
	}
	var looked []string
	for _, name := range s.Commands {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		looked = append(looked, name+" on $PATH")
	}
	if s.Tools != "" {
		root, err := ModuleRoot()
		if err != nil {
			looked = append(looked, fmt.Sprintf(".tools/%s under the module root (%v)", s.Tools, err))
		} else {
			p := filepath.Join(root, ".tools", filepath.FromSlash(s.Tools))
			if executable(p) == nil {
				return p, nil
			}
			looked = append(looked, p)
		}
	}
	if s.Abs != "" {
		if executable(s.Abs) == nil {
			return s.Abs, nil
		}
		looked = append(looked, s.Abs)
	}
	msg := fmt.Sprintf("%s is not installed (looked for %s)", s.What, strings.Join(looked, ", "))
	switch {
	case s.Install != "" && s.Env != "":
		msg += fmt.Sprintf(": %s or set $%s", s.Install, s.Env)
	case s.Install != "":
		msg += ": " + s.Install
	case s.Env != "":
		msg += fmt.Sprintf(": set $%s", s.Env)
	}
	return "", errors.New(msg)
}

// executable returns nil when p is a file some user may execute.
func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	if st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// ModuleRoot returns the module's root: the nearest directory at or above
// the working directory that holds go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
