"""lifetime layer."""
