package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// CA file names inside a certificate directory (`goray cert`).
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CreateCA writes a new CA certificate and key (ECDSA P-256) into dir as
// ca.pem and ca-key.pem (0600). It refuses to overwrite an existing CA.
func CreateCA(dir, name string, validFor time.Duration) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{CAFile, CAKeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("goray cert: %s already exists; remove it to make a new CA", filepath.Join(dir, f))
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if name == "" {
		name = "goray cluster CA"
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"goray"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	return writePair(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile), der, key)
}

// IssueCert writes <name>.pem and <name>-key.pem into outDir: a certificate
// for a node (or driver) signed by the CA in caDir, usable as both TLS
// server and client, with the given host names and IP addresses as
// subject alternative names (goray checks the CA, not the names; they are
// for other tools). It returns the two paths.
func IssueCert(caDir, outDir, name string, hosts []string, validFor time.Duration) (certPath, keyPath string, err error) {
	if name == "" {
		return "", "", errors.New("goray cert: a certificate needs a name")
	}
	ca, err := tls.LoadX509KeyPair(filepath.Join(caDir, CAFile), filepath.Join(caDir, CAKeyFile))
	if err != nil {
		return "", "", fmt.Errorf("goray cert: loading the CA in %s (make one with `goray cert ca`): %w", caDir, err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"goray"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validFor),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return "", "", err
	}
	certPath, keyPath = filepath.Join(outDir, name+".pem"), filepath.Join(outDir, name+"-key.pem")
	return certPath, keyPath, writePair(certPath, keyPath, der, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeFile(path string, b []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return fmt.Errorf("goray cert: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
