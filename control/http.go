package control

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// HTTPHandler serves /metrics (the registry, in the Prometheus text format
// or, when the scraper asks for it in its Accept header, OpenMetrics),
// /healthz (the process answers) and /readyz (200 once the daemon listens
// with its regions registered, 503 while starting or shutting down or when
// State.ReadyCheck fails, with the reason).
func HTTPHandler(s *State, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.ReadyErr(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(`<html><body><h1>xrnicd</h1><p><a href="/metrics">/metrics</a> <a href="/healthz">/healthz</a> <a href="/readyz">/readyz</a></p></body></html>` + "\n"))
	})
	return mux
}

// ValidateWebConfig reads the Prometheus exporter-toolkit web
// configuration file at path (TLS, basic auth, headers; "" is none) and
// the certificates it names, so a bad file fails start-up rather than
// every scrape.
func ValidateWebConfig(path string) error { return web.Validate(path) }

// ServeWebConfig is Serve with the exporter-toolkit web configuration
// file at path (the --web.config.file of Prometheus exporters): TLS and
// basic auth as it says, re-read on each connection and request, so
// certificates and passwords can change without a restart. "" serves
// plain HTTP as Serve does. log receives the toolkit's reports (nil: none).
func (s *HTTPServer) ServeWebConfig(path string, log *slog.Logger) error {
	if path == "" {
		return s.Serve()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Over TLS the server reports *tls.Conn to ConnState; the listener
	// tracks idleness by the connection it accepted.
	if cs := s.srv.ConnState; cs != nil {
		s.srv.ConnState = func(c net.Conn, st http.ConnState) {
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			cs(c, st)
		}
	}
	err := web.Serve(s.ln, s.srv, &web.FlagConfig{WebConfigFile: &path}, log)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
