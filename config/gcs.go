package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/hcl/v2"

	"github.com/goray-dev/goray/internal/auth"
)

// GCS configures the cluster's GCS (the gcs block): its storage, used by
// the head, and how long a node waits for it.
//
//	gcs {
//	  storage           = "redis"   # "bolt" (default for `goray start --head`), "redis" or "memory"
//	  reconnect_timeout = "60s"     # how long this node goes on without a GCS before it exits
//	  redis {
//	    address  = "10.0.0.5:6379"  # or $GORAY_GCS_REDIS_ADDRESS
//	    username = "goray"          # or $GORAY_GCS_REDIS_USERNAME
//	    password = "..."            # better: $GORAY_GCS_REDIS_PASSWORD
//	    db       = 0
//	    prefix   = "goray"          # namespaces the keys
//	    tls {                       # reach Redis over TLS (see RedisTLS)
//	      ca_file = "certs/redis-ca.pem"
//	    }
//	  }
//	}
//
// storage and redis only matter on the head (elsewhere they are ignored,
// with a warning); reconnect_timeout applies to every node.
type GCS struct {
	// Storage is GCSStorageBolt, GCSStorageRedis or GCSStorageMemory; ""
	// means the default for how the node runs: bolt (in GCSDataDir) for a
	// started head, memory for one embedded in a program.
	Storage string
	// ReconnectTimeout is how long the node goes on without reaching the
	// GCS before it exits (default DefaultGCSReconnectTimeout, 60s, as
	// Ray's gcs_rpc_server_reconnect_timeout_s).
	ReconnectTimeout time.Duration
	// Redis is the Redis server of storage "redis" (the redis block).
	Redis Redis
	// History caps what the head's GCS keeps of the cluster's past (the
	// history block, history.go).
	History GCSHistory
}

// Redis is the gcs block's redis block: the server the GCS keeps its
// tables in when storage is "redis". Address, Username and Password come
// from $GORAY_GCS_REDIS_ADDRESS, $GORAY_GCS_REDIS_USERNAME and
// $GORAY_GCS_REDIS_PASSWORD when the file leaves them empty (see
// Node.ApplyEnv).
//
// Password is a secret: String and GoString hide it, diagnostics never
// show it, and the source FormatDiagnostics renders has it masked.
type Redis struct {
	// Address is the server's host:port.
	Address string
	// Username and Password authenticate (Redis ACL; Password alone for
	// requirepass).
	Username, Password string
	// DB is the Redis database number (default 0).
	DB int
	// Prefix namespaces the keys, so that clusters can share a server
	// ("" means "goray").
	Prefix string
	// TLS is the redis block's tls block: whether and how the GCS reaches
	// the server over TLS.
	TLS RedisTLS
}

// RedisTLS is the redis block's tls block: the GCS reaches its Redis
// server over TLS (1.2 or later), verifying the server's certificate
// against the CA and the server name. The block turns TLS on, even empty
// (the system's roots then verify the server, as for a managed Redis);
// there is no setting that skips verification. The files are PEM, and
// relative paths are relative to the config file. Each setting the file
// leaves empty comes from its environment variable
// ($GORAY_GCS_REDIS_TLS_CA_FILE, ..._CERT_FILE, ..._KEY_FILE,
// ..._SERVER_NAME), and any of them set turns TLS on (see Node.ApplyEnv).
//
//	tls {
//	  ca_file     = "certs/redis-ca.pem"   # default: the system's roots
//	  cert_file   = "certs/goray.pem"      # a client certificate, for a server with tls-auth-clients yes
//	  key_file    = "certs/goray-key.pem"  # its key, readable by its owner only (chmod 600)
//	  server_name = "redis.internal"       # default: the host of address
//	}
//
// The paths are not secret; the key's bytes are never read into the
// config (the GCS process reads the file).
type RedisTLS struct {
	// Enabled is set by the tls block or a TLS environment variable.
	Enabled bool
	// CAFile is the CA certificate that signed the server's; "" trusts
	// the system's roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and its key (both
	// or neither).
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must be for; ""
	// means the host of Address.
	ServerName string
}

// String describes r with its password hidden.
func (r Redis) String() string {
	pw := ""
	if r.Password != "" {
		pw = "(hidden)"
	}
	// An address mistakenly given as a URL may carry a password too.
	addr := urlUserinfo.ReplaceAllString(r.Address, "://(hidden)@")
	tlsDesc := ""
	if t := r.TLS; t.Enabled {
		tlsDesc = fmt.Sprintf(" tls={ca_file=%q cert_file=%q key_file=%q server_name=%q}", t.CAFile, t.CertFile, t.KeyFile, t.ServerName)
	}
	return fmt.Sprintf("redis{address=%q username=%q password=%s db=%d prefix=%q%s}", addr, r.Username, pw, r.DB, r.Prefix, tlsDesc)
}

// GoString is String, so that %#v does not print the password either.
func (r Redis) GoString() string { return r.String() }

// GCS storages (GCS.Storage).
const (
	// GCSStorageBolt keeps the GCS's tables in the bbolt file gcs.db in
	// GCSDataDir, so a restarted head finds the cluster again.
	GCSStorageBolt = "bolt"
	// GCSStorageRedis keeps them in a Redis server (GCS.Redis).
	GCSStorageRedis = "redis"
	// GCSStorageMemory keeps them in the GCS process only: they end with
	// it.
	GCSStorageMemory = "memory"
)

// gcsStorages are the valid GCS.Storage values.
var gcsStorages = []string{GCSStorageBolt, GCSStorageRedis, GCSStorageMemory}

// DefaultGCSReconnectTimeout is GCS.ReconnectTimeout when the file sets
// none.
const DefaultGCSReconnectTimeout = 60 * time.Second

// Environment variables that supply the GCS's Redis settings the file
// leaves empty (Node.ApplyEnv).
const (
	EnvGCSRedisAddress  = "GORAY_GCS_REDIS_ADDRESS"
	EnvGCSRedisUsername = "GORAY_GCS_REDIS_USERNAME"
	EnvGCSRedisPassword = "GORAY_GCS_REDIS_PASSWORD"

	EnvGCSRedisTLSCAFile     = "GORAY_GCS_REDIS_TLS_CA_FILE"
	EnvGCSRedisTLSCertFile   = "GORAY_GCS_REDIS_TLS_CERT_FILE"
	EnvGCSRedisTLSKeyFile    = "GORAY_GCS_REDIS_TLS_KEY_FILE"
	EnvGCSRedisTLSServerName = "GORAY_GCS_REDIS_TLS_SERVER_NAME"
)

const (
	keyGCSStorage   = "gcs.storage"
	keyGCSReconnect = "gcs.reconnect_timeout"
	// keyGCSRedis is the redis block's header.
	keyGCSRedis     = "gcs.redis"
	keyRedisAddress = "gcs.redis.address"
	keyRedisUser    = "gcs.redis.username"
	keyRedisPass    = "gcs.redis.password"
	keyRedisDB      = "gcs.redis.db"
	keyRedisPrefix  = "gcs.redis.prefix"
	// keyRedisTLS is the tls block's header.
	keyRedisTLS     = "gcs.redis.tls"
	keyRedisTLSCA   = "gcs.redis.tls.ca_file"
	keyRedisTLSCert = "gcs.redis.tls.cert_file"
	keyRedisTLSKey  = "gcs.redis.tls.key_file"
	keyRedisTLSName = "gcs.redis.tls.server_name"
)

var gcsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "storage"}, {Name: "reconnect_timeout"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "redis"}, {Type: "history"}},
}

var redisSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "address"},
		{Name: "username"},
		{Name: "password"},
		{Name: "db"},
		{Name: "prefix"},
	},
	Blocks: []hcl.BlockHeaderSchema{{Type: "tls"}},
}

var redisTLSSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "ca_file"},
		{Name: "cert_file"},
		{Name: "key_file"},
		{Name: "server_name"},
	},
}

// GCSDataDir is the directory the head keeps its GCS's bbolt file in:
// DataDir, else "data" under TempDir.
func (n *Node) GCSDataDir() string {
	if n.DataDir != "" {
		return n.DataDir
	}
	return filepath.Join(n.TempDir, "data")
}

// ApplyEnv fills the GCS's Redis address, username and password the file
// left empty from $GORAY_GCS_REDIS_ADDRESS, $GORAY_GCS_REDIS_USERNAME and
// $GORAY_GCS_REDIS_PASSWORD, and its TLS settings from
// $GORAY_GCS_REDIS_TLS_CA_FILE, ..._CERT_FILE, ..._KEY_FILE and
// ..._SERVER_NAME (any of these turns TLS on; relative paths are relative
// to the working directory), read with getenv (a nil getenv fills
// nothing). The file wins over the environment, setting by setting.
// It also fills the logs block from $GORAY_LOG_MAX_FILE_SIZE and
// $GORAY_LOG_MAX_FILES (logs.go), and dashboard.port from
// $GORAY_DASHBOARD_PORT (observability.go). LoadWithFlags calls it with os.Getenv
// after Override and before Validate.
func (n *Node) ApplyEnv(getenv func(string) string) {
	if getenv == nil {
		return
	}
	n.applyLogsEnv(getenv)
	n.applyDashboardEnv(getenv)
	r := &n.GCS.Redis
	for _, e := range []struct {
		dst       *string
		key, name string
		tls       bool
	}{
		{&r.Address, keyRedisAddress, EnvGCSRedisAddress, false},
		{&r.Username, keyRedisUser, EnvGCSRedisUsername, false},
		{&r.Password, keyRedisPass, EnvGCSRedisPassword, false},
		{&r.TLS.CAFile, keyRedisTLSCA, EnvGCSRedisTLSCAFile, true},
		{&r.TLS.CertFile, keyRedisTLSCert, EnvGCSRedisTLSCertFile, true},
		{&r.TLS.KeyFile, keyRedisTLSKey, EnvGCSRedisTLSKeyFile, true},
		{&r.TLS.ServerName, keyRedisTLSName, EnvGCSRedisTLSServerName, true},
	} {
		if *e.dst != "" {
			continue
		}
		if v := getenv(e.name); v != "" {
			*e.dst = v
			r.TLS.Enabled = r.TLS.Enabled || e.tls
			// A copy, so that copies of n made earlier are not affected.
			n.fromEnv = maps.Clone(n.fromEnv)
			if n.fromEnv == nil {
				n.fromEnv = map[string]string{}
			}
			n.fromEnv[e.key] = e.name
		}
	}
}

// gcs decodes the gcs block (b may be nil).
func (d *decoder) gcs(b *hcl.Block) {
	if b == nil {
		return
	}
	g := &d.n.GCS
	c := d.content(b.Body, gcsSchema)
	d.str(c.Attributes["storage"], keyGCSStorage, &g.Storage)
	d.duration(c.Attributes["reconnect_timeout"], keyGCSReconnect, &g.ReconnectTimeout)
	blocks := d.singletons(c.Blocks, "redis", "history")
	d.gcsHistory(blocks["history"])
	rb := blocks["redis"]
	if rb == nil {
		return
	}
	d.n.ranges[keyGCSRedis] = rb.DefRange
	rc := d.content(rb.Body, redisSchema)
	r := &g.Redis
	d.str(rc.Attributes["address"], keyRedisAddress, &r.Address)
	d.str(rc.Attributes["username"], keyRedisUser, &r.Username)
	d.str(rc.Attributes["password"], keyRedisPass, &r.Password)
	d.intVal(rc.Attributes["db"], keyRedisDB, &r.DB)
	d.str(rc.Attributes["prefix"], keyRedisPrefix, &r.Prefix)
	tb := d.singletons(rc.Blocks, "tls")["tls"]
	if tb == nil {
		return
	}
	d.n.ranges[keyRedisTLS] = tb.DefRange
	tc := d.content(tb.Body, redisTLSSchema)
	t := &r.TLS
	t.Enabled = true
	d.str(tc.Attributes["ca_file"], keyRedisTLSCA, &t.CAFile)
	d.str(tc.Attributes["cert_file"], keyRedisTLSCert, &t.CertFile)
	d.str(tc.Attributes["key_file"], keyRedisTLSKey, &t.KeyFile)
	d.str(tc.Attributes["server_name"], keyRedisTLSName, &t.ServerName)
	t.CAFile, t.CertFile, t.KeyFile = d.relPath(t.CAFile), d.relPath(t.CertFile), d.relPath(t.KeyFile)
}

// gcs checks the gcs block: a known storage, a Redis server for storage
// "redis" and well-formed Redis settings, a positive reconnect_timeout,
// and warns about settings that have no effect. No diagnostic shows the
// password.
func (v *validator) gcs() {
	n := v.n
	g := n.GCS
	v.gcsHistory()
	if g.ReconnectTimeout <= 0 {
		v.errorf(keyGCSReconnect, "Invalid duration",
			"gcs.reconnect_timeout is how long a node goes on without reaching the GCS and must be positive, got %s; leave it out for %s.",
			g.ReconnectTimeout, DefaultGCSReconnectTimeout)
	}

	validStorage := g.Storage == "" || slices.Contains(gcsStorages, g.Storage)
	if !validStorage {
		v.errorf(keyGCSStorage, "Unknown GCS storage",
			"gcs.storage is %q; use %q (a file in data_dir, the default for `goray start --head`), %q (a Redis server) or %q (nothing kept when the GCS stops).%s",
			g.Storage, GCSStorageBolt, GCSStorageRedis, GCSStorageMemory, didYouMean(g.Storage, gcsStorages))
	}
	used := n.Head && g.Storage == GCSStorageRedis
	_, redisInFile := n.ranges[keyGCSRedis]

	r := g.Redis
	if used && r.Address == "" {
		v.errorf(keyGCSStorage, "Missing Redis address",
			"gcs.storage is %q but no Redis server is named: set gcs { redis { address = \"host:port\" } } or $%s.",
			GCSStorageRedis, EnvGCSRedisAddress)
	}
	if r.Address != "" && (used || v.fromFile(keyRedisAddress)) {
		v.redisAddress(r.Address)
	}
	if r.DB < 0 {
		v.errorf(keyRedisDB, "Invalid value", "gcs.redis.db is a Redis database number and must not be negative, got %d; leave it out for 0.", r.DB)
	}
	if strings.IndexFunc(r.Prefix, unicode.IsSpace) >= 0 {
		v.errorf(keyRedisPrefix, "Invalid Redis prefix",
			"gcs.redis.prefix %q contains whitespace; the prefix begins every key the GCS writes, so use letters, digits and punctuation only (for example \"goray-prod\").", r.Prefix)
	}
	if used {
		v.redisTLS(r.TLS)
	}

	if !n.Head {
		if g.Storage != "" {
			v.warnf(keyGCSStorage, "GCS storage on a node that is not the head",
				"gcs.storage is only used by the head's GCS; this node joins a head and ignores it. Remove it here, or make this node the head (head block or --head). gcs.reconnect_timeout applies to every node.")
		}
		if redisInFile {
			v.warnf(keyGCSRedis, "Redis settings on a node that is not the head",
				"The redis block is only used by the head's GCS; this node joins a head and ignores it. Remove it here, or make this node the head (head block or --head).")
		}
		return
	}
	if redisInFile && validStorage && g.Storage != GCSStorageRedis {
		storage := fmt.Sprintf("gcs.storage is not set (the head keeps its tables in %s when started, in %s when embedded in a program)", GCSStorageBolt, GCSStorageMemory)
		if g.Storage != "" {
			storage = fmt.Sprintf("gcs.storage is %q", g.Storage)
		}
		v.warnf(keyGCSRedis, "Redis settings are ignored",
			"The redis block only configures storage = %q, but %s. Set storage = %q in the gcs block to keep the GCS in Redis, or remove the redis block.",
			GCSStorageRedis, storage, GCSStorageRedis)
	}
}

// redisTLS checks the TLS settings of the Redis server the head uses:
// files that exist and are what they say (a CA file holding a
// certificate, a certificate that goes with its key), a key with a
// certificate and a certificate with a key, a key readable by its owner
// only (the rule of the cluster's own TLS key and token), and a server
// name without whitespace. Each diagnostic points at the setting, or
// names its environment variable.
func (v *validator) redisTLS(t RedisTLS) {
	if !t.Enabled {
		return
	}
	what := func(key string) string {
		if env, ok := v.n.fromEnv[key]; ok {
			return "$" + env
		}
		return key
	}
	ok := func(key, path string) bool {
		st, err := os.Stat(path)
		switch {
		case err != nil:
			v.errorf(key, "Redis TLS file not found", "%s: %v.", what(key), err)
			return false
		case st.IsDir():
			v.errorf(key, "Invalid Redis TLS file", "%s %q is a directory; it must be a PEM file.", what(key), path)
			return false
		}
		return true
	}
	if t.CAFile != "" && ok(keyRedisTLSCA, t.CAFile) {
		if b, err := os.ReadFile(t.CAFile); err != nil {
			v.errorf(keyRedisTLSCA, "Invalid Redis TLS file", "%s: %v.", what(keyRedisTLSCA), err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			v.errorf(keyRedisTLSCA, "Invalid Redis TLS file",
				"%s %q holds no PEM certificate; it must be the CA certificate that signed the Redis server's (-----BEGIN CERTIFICATE-----).", what(keyRedisTLSCA), t.CAFile)
		}
	}
	switch {
	case t.CertFile == "" && t.KeyFile == "":
	case t.CertFile == "":
		v.errorf(keyRedisTLSKey, "Redis TLS key without a certificate",
			"%s is set but no client certificate is: set cert_file (or $%s) too, or remove the key.", what(keyRedisTLSKey), EnvGCSRedisTLSCertFile)
	case t.KeyFile == "":
		v.errorf(keyRedisTLSCert, "Redis TLS certificate without a key",
			"%s is set but not its key: set key_file (or $%s) too, or remove the certificate.", what(keyRedisTLSCert), EnvGCSRedisTLSKeyFile)
	default:
		certOK, keyOK := ok(keyRedisTLSCert, t.CertFile), ok(keyRedisTLSKey, t.KeyFile)
		if !certOK || !keyOK {
			break
		}
		if st, err := os.Stat(t.KeyFile); err == nil && st.Mode().Perm()&0o077 != 0 {
			v.errorf(keyRedisTLSKey, "Redis TLS key readable by others", "%s: %v.", what(keyRedisTLSKey),
				&auth.InsecureFileError{Path: t.KeyFile, Mode: st.Mode().Perm()})
			break
		}
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			v.errorf(keyRedisTLSCert, "Invalid Redis TLS certificate",
				"%s %q with key %q: %v.", what(keyRedisTLSCert), t.CertFile, t.KeyFile, err)
		}
	}
	if strings.IndexFunc(t.ServerName, unicode.IsSpace) >= 0 {
		v.errorf(keyRedisTLSName, "Invalid Redis TLS server name",
			"%s %q contains whitespace; it is the host name the Redis server's certificate is for (for example \"redis.internal\").", what(keyRedisTLSName), t.ServerName)
	}
}

// fromFile reports whether the value under key came from the file.
func (v *validator) fromFile(key string) bool {
	_, ok := v.n.ranges[key]
	return ok
}

// redisAddress checks that addr is host:port with a non-zero port. An
// address that looks like a URL is not echoed: it may carry a password.
func (v *validator) redisAddress(addr string) {
	what := "gcs.redis.address"
	if env, ok := v.n.fromEnv[keyRedisAddress]; ok {
		what = "$" + env
	}
	if strings.Contains(addr, "://") || strings.Contains(addr, "@") {
		v.errorf(keyRedisAddress, "Invalid Redis address",
			"%s must be host:port (for example \"10.0.0.5:6379\"), not a URL: give the credentials as gcs.redis.username and password or $%s and $%s.",
			what, EnvGCSRedisUsername, EnvGCSRedisPassword)
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.errorf(keyRedisAddress, "Invalid Redis address", "%s %q must have the form host:port (for example \"10.0.0.5:6379\").", what, addr)
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
		v.errorf(keyRedisAddress, "Invalid Redis address",
			"%s %q must name the Redis server's host and a port from 1 to 65535 (for example \"10.0.0.5:6379\").", what, addr)
	}
}

// redisPlainAttrs are the redis block's arguments that are not secret;
// every other one (password, and misspellings of it) is masked in the
// source kept for FormatDiagnostics.
var redisPlainAttrs = []string{"address", "username", "db", "prefix", "tls"}

// passKey finds an argument or object key whose name contains "pass"
// (password, passwd, redis_password), in HCL (name =, name :) or JSON
// ("name":), and what follows up to its value.
var passKey = regexp.MustCompile(`(?i)"?[A-Za-z0-9_-]*pass[A-Za-z0-9_-]*"?[ \t]*[=:][ \t]*`)

// urlUserinfo finds the user:password@ of a URL (redis://:secret@host).
var urlUserinfo = regexp.MustCompile(`://([^/@\s"]*)@`)

// redactSource returns f with its source bytes copied and secrets replaced
// by '*' (same length, newlines kept, so every range still fits): the
// values of the gcs block's redis arguments other than redisPlainAttrs,
// and, as a net for source that did not parse, the value after any
// argument whose name contains "pass" and the user information of URLs
// (an address given as redis://user:password@host). The copy only serves to render
// snippets in FormatDiagnostics, which would otherwise print the line a
// password is on (for example a one-line redis block a warning points at).
func redactSource(f *hcl.File) *hcl.File {
	if f == nil || len(f.Bytes) == 0 {
		return f
	}
	src := slices.Clone(f.Bytes)
	mask := func(start, end int) {
		start, end = max(start, 0), min(end, len(src))
		for i := start; i < end; i++ {
			if src[i] != '\n' && src[i] != '\r' {
				src[i] = '*'
			}
		}
	}
	if f.Body != nil {
		for _, r := range secretRanges(f.Body) {
			s, e := r.Start.Byte, r.End.Byte
			// Keep the quotes of a plain string, for readability.
			if e-s >= 2 && e <= len(src) && s >= 0 && src[s] == '"' && src[e-1] == '"' {
				s, e = s+1, e-1
			}
			mask(s, e)
		}
	}
	for _, m := range passKey.FindAllIndex(src, -1) {
		i := m[1]
		if i < len(src) && src[i] == '"' {
			j := i + 1
			for j < len(src) && src[j] != '"' && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			mask(i+1, j)
			continue
		}
		j := i
		for j < len(src) && !strings.ContainsRune(" \t\r\n,}]", rune(src[j])) {
			j++
		}
		mask(i, j)
	}
	for _, m := range urlUserinfo.FindAllSubmatchIndex(src, -1) {
		mask(m[2], m[3])
	}
	c := *f
	c.Bytes = src
	return &c
}

// secretRanges finds the value ranges of the secret arguments of every
// gcs { redis { ... } } block in body, without evaluating anything.
func secretRanges(body hcl.Body) []hcl.Range {
	var out []hcl.Range
	gc, _, _ := body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "gcs"}}})
	if gc == nil {
		return nil
	}
	for _, g := range gc.Blocks {
		rc, _, _ := g.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "redis"}}})
		if rc == nil {
			continue
		}
		for _, r := range rc.Blocks {
			attrs, _ := r.Body.JustAttributes()
			for name, a := range attrs {
				if !slices.Contains(redisPlainAttrs, name) {
					out = append(out, a.Expr.Range())
				}
			}
		}
	}
	return out
}
