package jmserver

import (
	"net/http"
	"strings"

	"github.com/jmcluster/jmcluster/security"
)

// httpAuth guards a JM's HTTP views once it has TLS or bearer tokens. /healthz and /readyz stay
// open (load balancers and orchestrators probe them), /metrics too unless MetricsAuth; every
// other path (the JSON API and the web UI) needs an operator or reader: a client certificate of
// the CA (verified in the handshake) or a token of the token file, as "Authorization: Bearer
// SECRET" or as the password of HTTP basic authentication (which a browser asks for: the
// refusal says WWW-Authenticate: Basic). A plaintext JM without tokens serves everything open.
func httpAuth(d Deps, h http.Handler) http.Handler {
	if d.TLS == nil && d.Tokens == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz" || r.URL.Path == "/readyz":
			h.ServeHTTP(w, r)
			return
		case r.URL.Path == "/metrics" && !d.MetricsAuth:
			h.ServeHTTP(w, r)
			return
		}
		id, err := httpCaller(d, r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="jmcluster"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if id.Role != security.RoleOperator && id.Role != security.RoleReader {
			http.Error(w, id.String()+" may not read the HTTP views (roles admitted: operator, reader)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// httpCaller is the identity of an HTTP request: its client certificate, else its token.
func httpCaller(d Deps, r *http.Request) (security.Identity, error) {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		return security.IdentityOf(r.TLS.PeerCertificates[0])
	}
	if d.Tokens == nil {
		return security.Identity{}, errString("present a client certificate (this JobMaster has no --token-file)")
	}
	secret := ""
	if s, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		secret = strings.TrimSpace(s)
	} else if _, pw, ok := r.BasicAuth(); ok {
		secret = pw
	}
	if secret == "" {
		return security.Identity{}, errString("present a bearer token (Authorization: Bearer SECRET, or as the basic authentication password) or a client certificate")
	}
	return d.Tokens.Lookup(secret)
}

type errString string

func (e errString) Error() string { return string(e) }
