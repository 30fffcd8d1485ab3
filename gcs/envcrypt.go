package gcs

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/goray-dev/goray/internal/ids"
	"github.com/goray-dev/goray/internal/proto/gorayv1"
)

// A job's env (the variables its driver forwards to its workers with
// ray.ForwardEnv, often credentials) is written to the GCS's storage
// sealed, never in clear: AES-256-GCM under a key derived from the
// cluster's token (HKDF-SHA256), with the job's id as additional data so
// that a sealed env cannot be moved to another job's record. A restored
// GCS opens it again (a resumed job's workers need their env). Without a
// token (auth disabled) there is no key, and the env is not stored at all
// (docs/security.md says why).
//
// Sealed form: version byte (envSealV1), 12-byte nonce, then the
// ciphertext and tag of the env marshalled as a JobInfo holding only env.

// envSealV1 is the first byte of a sealed env of this format.
const envSealV1 = 1

// envKeyInfo is the HKDF info string: a key for nothing else.
const envKeyInfo = "goray gcs storage: job env v1"

// ErrEnvNotSealed says a sealed env could not be opened: it was sealed
// under another cluster token, or the record was changed (errors.Is).
var ErrEnvNotSealed = errors.New("the job's env cannot be opened with this cluster's token (sealed under another token, or changed)")

// envSealer seals and opens jobs' env for the storage; nil without a
// token.
type envSealer struct{ aead cipher.AEAD }

// newEnvSealer derives the env key from the cluster's token; "" (auth
// disabled) returns nil: nothing can be sealed.
func newEnvSealer(token string) (*envSealer, error) {
	if token == "" {
		return nil, nil
	}
	key, err := hkdf.Key(sha256.New, []byte(token), nil, envKeyInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("deriving the storage key of jobs' env: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &envSealer{aead: aead}, nil
}

// seal returns env sealed for job's record.
func (e *envSealer) seal(job ids.ID, env []string) []byte {
	plain, err := proto.Marshal(&gorayv1.JobInfo{Env: env})
	if err != nil {
		panic(fmt.Sprintf("gcs: marshalling a job's env: %v", err)) // strings always marshal
	}
	out := make([]byte, 1+e.aead.NonceSize(), 1+e.aead.NonceSize()+len(plain)+e.aead.Overhead())
	out[0] = envSealV1
	if _, err := rand.Read(out[1:]); err != nil {
		panic(fmt.Sprintf("gcs: reading random bytes: %v", err))
	}
	return e.aead.Seal(out, out[1:], plain, job.Bytes())
}

// open returns the env sealed in b for job's record; ErrEnvNotSealed
// (wrapped, saying why) when it cannot.
func (e *envSealer) open(job ids.ID, b []byte) ([]string, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: auth is disabled, so this GCS has no token to open it", ErrEnvNotSealed)
	}
	ns := e.aead.NonceSize()
	switch {
	case len(b) < 1+ns+e.aead.Overhead():
		return nil, fmt.Errorf("%w: %d bytes, too short", ErrEnvNotSealed, len(b))
	case b[0] != envSealV1:
		return nil, fmt.Errorf("%w: unknown format version %d", ErrEnvNotSealed, b[0])
	}
	plain, err := e.aead.Open(nil, b[1:1+ns], b[1+ns:], job.Bytes())
	if err != nil {
		return nil, ErrEnvNotSealed
	}
	var j gorayv1.JobInfo
	if err := proto.Unmarshal(plain, &j); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEnvNotSealed, err)
	}
	return j.GetEnv(), nil
}

// saveJobLocked queues job's record for the storage with its env sealed
// (left out without a token); s.mu must be held.
func (s *Server) saveJobLocked(id ids.ID, job *gorayv1.JobInfo) {
	if s.journal == nil {
		return
	}
	s.journal.put(tableJobs, id.String(), s.storedJob(id, job))
}

// storedJob is job as the storage keeps it: its env sealed, or left out
// without a token (logged once per job).
func (s *Server) storedJob(id ids.ID, job *gorayv1.JobInfo) *gorayv1.JobInfo {
	if len(job.GetEnv()) == 0 {
		return job
	}
	st := cloneMsg(job)
	st.Env = nil
	if s.envSealer == nil {
		if job.GetState() == StateRunning {
			s.log.Warn("auth is disabled: the job's forwarded env is not written to the GCS's storage (there is no cluster token to seal it with); a GCS restarted while the job runs starts its workers without it",
				"job", id.Short(), "variables", len(job.GetEnv()))
		}
		return st
	}
	st.SealedEnv = s.envSealer.seal(id, job.GetEnv())
	return st
}
