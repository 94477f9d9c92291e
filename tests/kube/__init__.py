"""Tests of the Kubernetes driver, against a real control plane (tests/kube/realcluster.py)."""
