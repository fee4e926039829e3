// Package deploy holds no code: it is the home of xrnicd's deployment
// files (systemd unit, Prometheus scrape configuration and alert rules,
// Grafana dashboard, Kubernetes DaemonSet; see README.md) and of the tests
// that check them against the real binaries: promtool checks and rule unit
// tests, the dashboard's metric names against a live daemon's /metrics, and
// the end-to-end walk-through (xrnicd with two regions, xrnicctl operations,
// metrics, a real Prometheus server scraping the daemon, SIGTERM cleanup).
package deploy
