package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TLSFiles names the PEM files of mutual TLS: the cluster's CA certificate,
// and this process's certificate (signed by that CA) and private key.
type TLSFiles struct {
	CA   string `json:"ca_file"`
	Cert string `json:"cert_file"`
	Key  string `json:"key_file"`
}

// TLSFromEnv reads EnvTLSCA, EnvTLSCert and EnvTLSKey: nil when none is
// set, an error naming the missing ones when only some are.
func TLSFromEnv() (*TLSFiles, error) {
	f := &TLSFiles{CA: os.Getenv(EnvTLSCA), Cert: os.Getenv(EnvTLSCert), Key: os.Getenv(EnvTLSKey)}
	if f.CA == "" && f.Cert == "" && f.Key == "" {
		return nil, nil
	}
	var missing []string
	for _, v := range [][2]string{{EnvTLSCA, f.CA}, {EnvTLSCert, f.Cert}, {EnvTLSKey, f.Key}} {
		if v[1] == "" {
			missing = append(missing, v[0])
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("goray auth: TLS needs %s, %s and %s; %v not set", EnvTLSCA, EnvTLSCert, EnvTLSKey, missing)
	}
	return f.abs(), nil
}

// abs returns f with every path absolute, a copy when one was not
// (relative ones are relative to the working directory; a path that cannot
// be made absolute stays as it is, and reading it fails naming it).
func (f *TLSFiles) abs() *TLSFiles {
	if filepath.IsAbs(f.CA) && filepath.IsAbs(f.Cert) && filepath.IsAbs(f.Key) {
		return f
	}
	out := *f
	for _, p := range []*string{&out.CA, &out.Cert, &out.Key} {
		if *p == "" || filepath.IsAbs(*p) {
			continue
		}
		if a, err := filepath.Abs(*p); err == nil {
			*p = a
		}
	}
	return &out
}

// load reads the files and returns the server and client configurations.
// Both sides present their certificate and require the peer's, signed by
// the CA (mutual TLS). Peers are trusted by their CA, not by name: any
// certificate the cluster's CA signed is a member of the cluster, which is
// what lets nodes join from addresses nobody knew when the certificates
// were made (as Nomad without verify_server_hostname).
func (f *TLSFiles) load() (srv, cli *tls.Config, err error) {
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, nil, fmt.Errorf("goray tls: reading the CA certificate (tls.ca_file, or $%s): %w", EnvTLSCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("goray tls: %s (tls.ca_file, or $%s) holds no PEM certificate", f.CA, EnvTLSCA)
	}
	if st, err := os.Stat(f.Key); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, nil, &InsecureFileError{Path: f.Key, Mode: st.Mode().Perm()}
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("goray tls: loading the certificate %s and key %s (tls.cert_file and tls.key_file, or $%s and $%s): %w", f.Cert, f.Key, EnvTLSCert, EnvTLSKey, err)
	}
	verify := func(cs tls.ConnectionState, usage x509.ExtKeyUsage) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("goray tls: the peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
		if err != nil {
			return fmt.Errorf("goray tls: the peer's certificate is not from this cluster's CA: %w", err)
		}
		return nil
	}
	srv = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{"h2"},
	}
	cli = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		// The chain is checked below against the CA, without the host name.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verify(cs, x509.ExtKeyUsageServerAuth)
		},
		NextProtos: []string{"h2"},
	}
	return srv, cli, nil
}
