"""Developer tools of the repository (not shipped): the Kubernetes control plane for tests."""
