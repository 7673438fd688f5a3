"""Helpers several built-in plugins share: none of these modules is a plugin (docs/architecture.md)."""
