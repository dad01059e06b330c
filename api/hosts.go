package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// HostPolicy says which host names a server answers to, in the Host
// header of every request and in the Origin header of a browser's. It
// closes DNS rebinding: a page of evil.example whose name the attacker
// re-points at this server's address reaches it as the same origin, but
// its requests still say Host: evil.example, and are refused.
//
// Allowed always: IP addresses (a rebinding needs a name; a browser that
// sends an address connected to it), localhost and names under
// .localhost (browsers resolve those to loopback themselves), and the
// listen address's host when it is a name. Other names only as the
// operator lists them (--allowed-host): a name, .example.com for every
// name under example.com, or * for any (a proxy in front checks them).
type HostPolicy struct {
	any      bool
	names    []string
	suffixes []string
}

// NewHostPolicy returns the policy of a server listening on addr with the
// names allowed (--allowed-host values).
func NewHostPolicy(addr string, allowed []string) (HostPolicy, error) {
	var p HostPolicy
	for _, a := range allowed {
		name := normalHost(a)
		switch {
		case a == "*":
			p.any = true
		case strings.HasPrefix(name, ".") && validName(name[1:]):
			p.suffixes = append(p.suffixes, name)
		case validName(name):
			p.names = append(p.names, name)
		default:
			return HostPolicy{}, fmt.Errorf("%q: want a host name (orrery.example.com), .example.com for every name under it, or *", a)
		}
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && validName(normalHost(host)) {
		p.names = append(p.names, normalHost(host))
	}
	return p, nil
}

// Allows reports whether host (a Host header's value, with or without a
// port) names this server.
func (p HostPolicy) Allows(host string) bool {
	if p.any {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = normalHost(host)
	if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		return true
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if slices.Contains(p.names, host) {
		return true
	}
	return slices.ContainsFunc(p.suffixes, func(s string) bool { return strings.HasSuffix(host, s) })
}

// allowsOrigin reports whether a browser's Origin header names an allowed
// host; a request without one (not from a browser page) passes. "null"
// (a sandboxed frame, a file) does not.
func (p HostPolicy) allowsOrigin(origin string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return p.Allows(u.Host)
}

// Guard refuses (403) a request whose Host, or whose Origin, the policy
// does not allow, before next sees it.
func (p HostPolicy) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.Allows(r.Host) {
			http.Error(w, "this server does not answer to the host "+printable(r.Host)+" (--allowed-host)", http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); !p.allowsOrigin(origin) {
			http.Error(w, "requests from the origin "+printable(origin)+" are refused (--allowed-host)", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLoopback reports whether the listen address addr (host:port) is a
// loopback address or localhost: reachable from this machine only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if normalHost(host) == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// normalHost is a host name as compared: lower case, without a final dot.
func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// validName reports whether h is a DNS name: labels of letters, digits
// and hyphens, 253 bytes at most.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// printable quotes s for an error message, cut to 100 bytes.
func printable(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return fmt.Sprintf("%q", s)
}
