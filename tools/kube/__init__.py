"""A real Kubernetes control plane, built from Go modules, for the tests and for people."""
