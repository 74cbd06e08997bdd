"""synthesis layer."""
