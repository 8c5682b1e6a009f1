"""Container tests: trainq against a real engine (podman; the docker CLI on its service)."""
