"""Built-in task families (each a plugin registered like any third-party one)."""
