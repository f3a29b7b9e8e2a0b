// Package localauth authenticates local clients and services: the HMAC
// identity challenge (a client learns that the server knows the token before
// it sends the token), the bearer and instance-id binding, Unix-socket peer
// credentials, and the Host/Origin checks that stop DNS rebinding and
// cross-site requests.
package localauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

// Header names.
const (
	HeaderInstance = "X-DeepCode-Instance"
	proofContext   = "deepcode-identity-v1"
)

// NewChallenge returns a fresh 256-bit challenge, hex encoded.
func NewChallenge() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// ValidChallenge reports whether c looks like NewChallenge's output: 64
// lowercase hexadecimal characters. Only the canonical spelling is accepted,
// so a used challenge cannot be presented again as a fresh one by changing
// the case of its letters.
func ValidChallenge(c string) bool {
	if len(c) != 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if b := c[i]; (b < '0' || b > '9') && (b < 'a' || b > 'f') {
			return false
		}
	}
	return true
}

// Proof is HMAC-SHA256(token, context ‖ instanceID ‖ challenge): only a
// holder of the token can compute it, and it binds the instance id.
func Proof(token, instanceID, challenge string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(proofContext))
	m.Write([]byte{0})
	m.Write([]byte(instanceID))
	m.Write([]byte{0})
	m.Write([]byte(challenge))
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyProof checks a proof in constant time.
func VerifyProof(token, instanceID, challenge, proof string) bool {
	want := Proof(token, instanceID, challenge)
	return subtle.ConstantTimeCompare([]byte(want), []byte(proof)) == 1
}

// ChallengeCache remembers recent challenges so a server answers each one
// once: a replayed challenge is refused. It is bounded in size and age.
type ChallengeCache struct {
	mu   sync.Mutex
	seen map[string]time.Time
	ttl  time.Duration
	max  int
	now  func() time.Time
}

// NewChallengeCache keeps up to max challenges for ttl.
func NewChallengeCache(max int, ttl time.Duration) *ChallengeCache {
	return &ChallengeCache{seen: map[string]time.Time{}, ttl: ttl, max: max, now: time.Now}
}

// Admit records c and reports false if it was seen within the TTL.
func (c *ChallengeCache) Admit(ch string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if t, ok := c.seen[ch]; ok && now.Sub(t) < c.ttl {
		return false
	}
	if len(c.seen) >= c.max {
		oldestKey, oldest := "", now
		for k, t := range c.seen {
			if now.Sub(t) >= c.ttl {
				delete(c.seen, k)
				continue
			}
			if t.Before(oldest) {
				oldestKey, oldest = k, t
			}
		}
		if len(c.seen) >= c.max {
			delete(c.seen, oldestKey)
		}
	}
	c.seen[ch] = now
	return true
}

// CheckBearer verifies "Authorization: Bearer <token>" and the instance
// header in constant time. A wrong or missing token is UNAUTHORIZED; a right
// token for another instance id is IDENTITY_MISMATCH.
func CheckBearer(r *http.Request, token, instanceID string) error {
	auth := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if !strings.HasPrefix(auth, prefix) {
		return errs.New(errs.Unauthorized, "missing bearer credential: run the command again through the deepcode CLI")
	}
	got := strings.TrimSpace(auth[len(prefix):])
	if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
		return errs.New(errs.Unauthorized, "wrong credential for this service")
	}
	inst := r.Header.Get(HeaderInstance)
	if inst == "" {
		return errs.New(errs.Unauthorized, "missing %s header", HeaderInstance)
	}
	if subtle.ConstantTimeCompare([]byte(inst), []byte(instanceID)) != 1 {
		return errs.New(errs.IdentityMismatch, "request addressed to instance %s, but this is %s", inst, instanceID).With("instanceId", instanceID)
	}
	return nil
}

// HostPolicy decides which Host headers a listener accepts.
type HostPolicy func(host string) bool

// LoopbackHost accepts exactly 127.0.0.1:<port>, localhost:<port> and
// [::1]:<port> for the listener's real port (case-insensitive), and
// nothing else: not an empty host, not ":<port>", not a name that merely
// starts with localhost.
func LoopbackHost(port func() int) HostPolicy {
	return func(host string) bool {
		h, p, err := net.SplitHostPort(strings.ToLower(host))
		if err != nil || p != strconv.Itoa(port()) {
			return false
		}
		return h == "127.0.0.1" || h == "localhost" || h == "::1"
	}
}

// UnixSocketHost is the policy of Unix-socket listeners: a loopback name,
// with or without a port (proxied requests keep the browser's port).
func UnixSocketHost(host string) bool {
	h := strings.ToLower(host)
	if hh, p, err := net.SplitHostPort(h); err == nil {
		if _, perr := strconv.ParseUint(p, 10, 16); perr != nil {
			return false
		}
		h = hh
	}
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// Guard rejects requests with a disallowed Host (403 HOST_REJECTED) and,
// when rejectOrigin is set, any Origin header (403 ORIGIN_REJECTED: browsers
// send Origin, native clients do not, and management is not for browsers).
// Every answer it guards is marked no-store.
func Guard(hosts HostPolicy, rejectOrigin bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if !hosts(r.Host) {
			writeError(w, errs.New(errs.HostRejected, "host %q is not allowed: use 127.0.0.1 or localhost", r.Host))
			return
		}
		if rejectOrigin {
			if _, ok := r.Header["Origin"]; ok {
				writeError(w, errs.New(errs.OriginRejected, "browser requests are not accepted on management routes"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeError(w http.ResponseWriter, e *errs.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Code.HTTPStatus())
	_, _ = w.Write([]byte(`{"error":{"code":"` + string(e.Code) + `","message":` + strconv.Quote(e.Message) + `,"retryable":false}}` + "\n"))
}
