"""The repository's own tools (not part of the bridge or the consumer package)."""
