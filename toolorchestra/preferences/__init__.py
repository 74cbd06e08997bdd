"""preferences layer."""
