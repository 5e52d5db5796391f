"""End-to-end tier: tests against a real Kubernetes control plane (see README.md here)."""
