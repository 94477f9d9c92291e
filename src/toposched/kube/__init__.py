"""toposched as a secondary Kubernetes scheduler: a driver of the core over the Kubernetes API."""
