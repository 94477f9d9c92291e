"""Tests of the Kubernetes driver, and the API server emulator they run against."""
