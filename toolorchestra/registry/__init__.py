"""registry layer."""
