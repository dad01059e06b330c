package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EgressPolicy decides which addresses webhooks may connect to. It is
// checked on the address a connection is about to be made to, after DNS
// resolution, for the first request and for every redirect: a name that
// resolves (or re-resolves, DNS rebinding) to a refused address is
// refused before any packet is sent to it.
//
// By default it refuses the addresses that reach the worker's own machine
// or network rather than the internet: loopback, private, link-local
// (cloud metadata services live at 169.254.169.254), unspecified,
// multicast, shared (100.64.0.0/10) and reserved ranges (see deniedRanges).
// Allow lists ranges to permit anyway.
type EgressPolicy struct {
	Allow []netip.Prefix

	// connecting, when set (tests only), is called with each address the
	// policy let through, just before the connection is made.
	connecting func(netip.AddrPort)
}

// EgressError is a connection the egress policy refused.
type EgressError struct {
	Addr netip.Addr
	Kind string // "loopback", "private", "link-local", ...
}

func (e *EgressError) Error() string {
	return fmt.Sprintf("egress to %s refused: %s address (this worker's egress policy; allow it with --allow-egress %s)",
		e.Addr, e.Kind, netip.PrefixFrom(e.Addr, e.Addr.BitLen()))
}

// deniedRanges are refused unless an Allow prefix contains the address.
var deniedRanges = func() []struct {
	prefix netip.Prefix
	kind   string
} {
	var out []struct {
		prefix netip.Prefix
		kind   string
	}
	for _, r := range [][2]string{
		{"0.0.0.0/8", "unspecified"}, // "this network"; connecting to 0.0.0.0 reaches this host
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "shared (carrier-grade NAT)"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "reserved"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "reserved"},
		{"224.0.0.0/4", "multicast"},
		{"240.0.0.0/4", "reserved"}, // with 255.255.255.255
		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "private"}, // deprecated site-local
		{"fc00::/7", "private"},
		{"ff00::/8", "multicast"},
		{"64:ff9b:1::/48", "reserved"}, // local-use NAT64
	} {
		out = append(out, struct {
			prefix netip.Prefix
			kind   string
		}{netip.MustParsePrefix(r[0]), r[1]})
	}
	return out
}()

// nat64 is the well-known NAT64 prefix: 64:ff9b::a.b.c.d reaches a.b.c.d
// through a NAT64 gateway, so it is judged as a.b.c.d.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Check reports whether a connection to addr is allowed: nil, or an
// *EgressError.
func (p *EgressPolicy) Check(addr netip.Addr) error {
	addr = addr.WithZone("")
	plain := addr.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	if p != nil {
		for _, a := range p.Allow {
			if a.Contains(plain) || a.Contains(addr) {
				return nil
			}
		}
	}
	if plain.Is6() && nat64.Contains(plain) {
		b := plain.As16()
		v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
		if err := p.Check(v4); err != nil {
			return &EgressError{Addr: addr, Kind: "NAT64 of a " + err.(*EgressError).Kind}
		}
		return nil
	}
	for _, r := range deniedRanges {
		if r.prefix.Contains(plain) {
			return &EgressError{Addr: addr, Kind: r.kind}
		}
	}
	return nil
}

// control is the dialer's Control function: it runs after the socket is
// created and before it connects, with the resolved address.
func (p *EgressPolicy) control(_ context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress to %s refused: not an IP address and port (%s)", address, network)
	}
	if err := p.Check(ap.Addr()); err != nil {
		return err
	}
	if p != nil && p.connecting != nil {
		p.connecting(ap)
	}
	return nil
}

// ParseEgress parses --allow-egress values: CIDRs (10.1.0.0/16) or single
// addresses (10.1.2.3), several per value when separated by commas.
func ParseEgress(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if pfx, err := netip.ParsePrefix(s); err == nil {
				out = append(out, pfx.Masked())
				continue
			}
			addr, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q: want a CIDR such as 127.0.0.1/32 or 10.0.0.0/8", s)
			}
			out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}
	return out, nil
}

// MaxRedirects is how many redirects a webhook call follows.
const MaxRedirects = 5

// RedirectError is a redirect a webhook call refused to follow.
type RedirectError struct{ Reason string }

func (e *RedirectError) Error() string { return "redirect refused: " + e.Reason }

// runnerHeaders are the headers the runner itself sets; on a redirect to
// another host only these are kept (a step's headers may carry secrets).
var runnerHeaders = []string{"Content-Type", "User-Agent", "Idempotency-Key", "X-Orrery-Attempt", "X-Orrery-Fencing-Token"}

// checkRedirect follows at most MaxRedirects redirects, never from https
// to http, and sends a step's own headers only to the host the step
// named. Where a redirect may connect is the egress policy's to say: the
// dialer checks it as it checks the first request.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return &RedirectError{Reason: fmt.Sprintf("stopped after %d redirects", MaxRedirects)}
	}
	if via[len(via)-1].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return &RedirectError{Reason: "from https to " + req.URL.Scheme}
	}
	if !sameOrigin(req.URL, via[0].URL) {
		kept := http.Header{}
		for _, k := range runnerHeaders {
			if v := req.Header.Values(k); len(v) > 0 {
				kept[k] = v
			}
		}
		req.Header = kept
	}
	return nil
}

// sameOrigin reports whether redirect target a is where the step sent its
// first request, b: the same scheme, host and port (a default port
// written out or not), or that host's upgrade from http on port 80 to
// https on 443. A step's headers (its resolved secrets) go only there,
// not to another service on the host.
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	if !strings.EqualFold(a.Hostname(), b.Hostname()) {
		return false
	}
	if strings.EqualFold(a.Scheme, b.Scheme) && port(a) == port(b) {
		return true
	}
	return strings.EqualFold(b.Scheme, "http") && port(b) == "80" && strings.EqualFold(a.Scheme, "https") && port(a) == "443"
}

// NewHTTPClient returns the client webhooks are called with: every
// connection, redirects' too, goes through p (nil: the default policy);
// no proxy is used (a proxy would connect on the step's behalf, past the
// policy); redirects as checkRedirect says. It has no overall timeout:
// each attempt has its step's.
func NewHTTPClient(p *EgressPolicy) *http.Client {
	if p == nil {
		p = &EgressPolicy{}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, ControlContext: p.control}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: checkRedirect,
	}
}

// defaultClient is HTTPRunner's client when it has none: the default
// egress policy, which refuses loopback and private addresses.
var defaultClient = sync.OnceValue(func() *http.Client { return NewHTTPClient(nil) })

// egressFailure reports a webhook call the egress or redirect policy
// refused: not retryable, the step's URL is the problem.
func egressFailure(err error) (Result, bool) {
	var egress *EgressError
	var redirect *RedirectError
	if errors.As(err, &egress) || errors.As(err, &redirect) {
		return Result{ExitReason: ReasonError, FailureClass: ClassUser, Error: err.Error()}, true
	}
	return Result{}, false
}
