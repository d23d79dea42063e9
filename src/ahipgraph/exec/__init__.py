"""exec layer."""
