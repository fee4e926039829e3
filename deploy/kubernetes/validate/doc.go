// Package validate checks the Kubernetes manifests of deploy/kubernetes in
// its tests: every document is decoded strictly into its k8s.io/api type
// (unknown, misspelt or duplicate fields fail), and the DaemonSet is held
// to what xrnicd needs and what deploy/README.md promises: the afxdp
// transport on a configured interface, exactly the capabilities of the
// systemd unit, RuntimeDefault seccomp, no service account token, node
// agent tolerations and priority, probes on the metrics port, only the
// mounts xrnicd uses, hugepages that cover the regions, and the image
// that deploy/Dockerfile builds.
//
// It is a module of its own so that the main module does not depend on
// the Kubernetes libraries; `make unit` runs its tests.
package validate
