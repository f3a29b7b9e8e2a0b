package localauth

import (
	"context"
	"net"
	"net/http"
	"os"

	"github.com/deepcode-dev/deepcode/shared/errs"
)

type peerKey struct{}

// PeerInfo is what the kernel says about a Unix-socket client.
type PeerInfo struct {
	UID int
	PID int // 0 where the platform does not tell
	Err error
}

// ConnContext is an http.Server ConnContext that records the peer
// credentials of Unix-socket connections.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	info := peerCredentials(uc)
	return context.WithValue(ctx, peerKey{}, &info)
}

// PeerFrom returns the recorded credentials, or nil for non-Unix connections.
func PeerFrom(ctx context.Context) *PeerInfo {
	p, _ := ctx.Value(peerKey{}).(*PeerInfo)
	return p
}

// RequireSameUser refuses Unix-socket clients whose uid is not ours
// (SO_PEERCRED / getpeereid). Connections that are not Unix sockets pass:
// they are checked by bearer instead.
func RequireSameUser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := CheckPeer(r.Context()); err != nil {
			writeError(w, errs.From(err))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// CheckPeer is RequireSameUser's test.
func CheckPeer(ctx context.Context) error {
	p := PeerFrom(ctx)
	if p == nil {
		return nil
	}
	if p.Err != nil {
		return errs.Wrap(p.Err, errs.Forbidden, "cannot read the peer's credentials")
	}
	if p.UID != os.Geteuid() {
		return errs.New(errs.Forbidden, "connections from user %d are not accepted", p.UID)
	}
	return nil
}
