package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goray-dev/goray/config"
	"github.com/goray-dev/goray/internal/auth"
	"github.com/spf13/cobra"
)

// nodeAuth is how a started node authenticates, for the start message.
type nodeAuth struct {
	creds *auth.Credentials
	// from says where the token came from ("$GORAY_AUTH_TOKEN" or a path).
	from string
	// created is set when this start generated the token file.
	created bool
}

// nodeCredentials resolves the credentials of a node being started: the
// mode from $GORAY_AUTH_MODE or the auth block; the token from
// $GORAY_AUTH_TOKEN, else the token file (--auth-token-file, auth.token_file,
// $GORAY_AUTH_TOKEN_PATH, ~/.goray/auth_token), which a head creates when it
// is missing and a joining node must find; TLS from the tls block, else the
// GORAY_TLS_* variables.
func nodeCredentials(cfg *config.Node) (nodeAuth, error) {
	files, err := auth.TLSFromEnv()
	if err != nil {
		return nodeAuth{}, err
	}
	if t := cfg.TLS; t != nil {
		files = &auth.TLSFiles{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile}
	}
	mode := strings.ToLower(os.Getenv(auth.EnvMode))
	if mode == "" {
		mode = cfg.Auth.Mode
	}
	switch mode {
	case "", auth.ModeToken:
	case auth.ModeDisabled:
		c, err := auth.Disabled(files)
		return nodeAuth{creds: c}, err
	default:
		return nodeAuth{}, usagef("$%s=%q: want %q or %q", auth.EnvMode, mode, auth.ModeToken, auth.ModeDisabled)
	}
	if t := strings.TrimSpace(os.Getenv(auth.EnvToken)); t != "" {
		c, err := auth.New(t, files)
		if err != nil {
			return nodeAuth{}, fmt.Errorf("$%s: %w", auth.EnvToken, err)
		}
		return nodeAuth{creds: c, from: "$" + auth.EnvToken}, nil
	}
	path := cfg.Auth.TokenFile
	if path == "" {
		path = auth.TokenPath()
	}
	if path == "" {
		return nodeAuth{}, fmt.Errorf("no place for the cluster token: set $%s, $%s or auth.token_file (no home directory)", auth.EnvToken, auth.EnvTokenPath)
	}
	path = absPath(path)
	var tok string
	created := false
	if cfg.Head {
		tok, created, err = auth.LoadOrCreateToken(path)
	} else {
		tok, err = auth.ReadTokenFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nodeAuth{}, fmt.Errorf("joining a cluster needs its token, and %s does not exist: copy the head's token file there "+
				"(owner-only permissions), or give it with --auth-token-file or $%s", path, auth.EnvToken)
		}
	}
	if err != nil {
		return nodeAuth{}, err
	}
	c, err := auth.New(tok, files)
	return nodeAuth{creds: c, from: path, created: created}, err
}

// clientCreds are the credentials of a command: the environment's, with the
// TLS files of the node running under tempDir when the environment names
// none (a command on a TLS cluster's machine needs no setup).
func (a *app) clientCreds(tempDir string) (*auth.Credentials, error) {
	creds, err := auth.FromEnv()
	if err != nil || creds.TLS() {
		return creds, err
	}
	info, err := procFS{a.procRoot}.findHead(tempDir)
	if err != nil || info.TLS == nil {
		return creds, nil
	}
	a.log.Debug("using the local node's TLS files", "cert", info.TLS.Cert)
	if !creds.Enabled() {
		return auth.Disabled(info.TLS)
	}
	return auth.New(creds.Token(), info.TLS)
}

// describe is the start message's lines about authentication.
func (na nodeAuth) describe() (row string, notes []string) {
	c := na.creds
	tlsNote := ""
	if c.TLS() {
		tlsNote = ", mutual TLS between machines"
	}
	if !c.Enabled() {
		return "DISABLED" + tlsNote, []string{
			"WARNING: authentication is disabled: anyone who can reach this node's ports can run code on it as this user.",
			"Use it only on a network you trust; remove auth { mode = \"disabled\" } / $" + auth.EnvMode + " to turn it on.",
		}
	}
	row = "token from " + na.from + tlsNote
	if na.created {
		notes = append(notes, "Generated a new cluster token in "+na.from+" (owner-only). Drivers and commands on this machine find it there.")
	}
	return row, notes
}

func (a *app) certCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make a cluster CA and node certificates for TLS",
		Long: "Make the files of mutual TLS between goray processes: a CA for the cluster (`goray cert ca`) and a\n" +
			"certificate per node signed by it (`goray cert issue`). Point each node's tls block (or the\n" +
			"GORAY_TLS_CA_FILE, GORAY_TLS_CERT_FILE and GORAY_TLS_KEY_FILE variables of drivers) at them.\n" +
			"Keys are written owner-only; keep ca-key.pem off the nodes.",
		Args: cobra.NoArgs,
	}
	var dir, name string
	var days int
	ca := &cobra.Command{
		Use:   "ca --dir DIR",
		Short: "Create a cluster CA (ca.pem and ca-key.pem in DIR)",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if err := auth.CreateCA(dir, name, time.Duration(days)*24*time.Hour); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Created the cluster CA: %s (certificate), %s (key, keep it safe)\n",
				filepath.Join(dir, auth.CAFile), filepath.Join(dir, auth.CAKeyFile))
			return nil
		}),
	}
	ca.Flags().StringVar(&dir, "dir", "", "directory for ca.pem and ca-key.pem (created 0700)")
	ca.Flags().StringVar(&name, "name", "", "the CA's common name")
	ca.Flags().IntVar(&days, "days", 3650, "validity in days")
	_ = ca.MarkFlagRequired("dir")

	var out string
	var hosts []string
	issue := &cobra.Command{
		Use:   "issue --dir CADIR --name NAME [--host IP|NAME]... [--out DIR]",
		Short: "Issue a node certificate signed by the CA (NAME.pem and NAME-key.pem)",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if out == "" {
				out = dir
			}
			certPath, keyPath, err := auth.IssueCert(dir, out, name, hosts, time.Duration(days)*24*time.Hour)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Issued %s (certificate) and %s (key)\nUse them in the node's config:\n  tls {\n    ca_file   = %q\n    cert_file = %q\n    key_file  = %q\n  }\n",
				certPath, keyPath, filepath.Join(dir, auth.CAFile), certPath, keyPath)
			return nil
		}),
	}
	issue.Flags().StringVar(&dir, "dir", "", "directory of the CA (ca.pem, ca-key.pem)")
	issue.Flags().StringVar(&name, "name", "", "certificate name (file names and common name)")
	issue.Flags().StringVar(&out, "out", "", "directory for the certificate and key (default: --dir)")
	issue.Flags().StringSliceVar(&hosts, "host", nil, "IP address or DNS name to list in the certificate (repeatable; informational: goray trusts the CA)")
	issue.Flags().IntVar(&days, "days", 825, "validity in days")
	_ = issue.MarkFlagRequired("dir")
	_ = issue.MarkFlagRequired("name")
	cmd.AddCommand(ca, issue)
	return cmd
}

func (a *app) authCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Show or create the cluster token",
		Args:  cobra.NoArgs,
	}
	var generate bool
	token := &cobra.Command{
		Use:   "token [--generate]",
		Short: "Print the cluster token this machine uses (to copy it to another machine)",
		Long: "Print the cluster token: $GORAY_AUTH_TOKEN, else the file $GORAY_AUTH_TOKEN_PATH names, else\n" +
			"~/.goray/auth_token. With --generate, create that file with a new token when it does not exist.",
		Args: cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if generate && os.Getenv(auth.EnvToken) == "" {
				if _, _, err := auth.LoadOrCreateToken(auth.TokenPath()); err != nil {
					return err
				}
			}
			t, from, err := auth.FindToken()
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%w (create it with `goray auth token --generate`, or start a head)", err)
			}
			if err != nil {
				return err
			}
			if t == "" {
				return fmt.Errorf("no cluster token: %s does not exist (start a head, or run `goray auth token --generate`)", auth.TokenPath())
			}
			a.log.Debug("token found", "from", from)
			fmt.Fprintln(a.stdout, t)
			return nil
		}),
	}
	token.Flags().BoolVar(&generate, "generate", false, "create the token file when it does not exist")
	cmd.AddCommand(token)
	return cmd
}
