"""Built-in engineers, context modules, trainers and policies."""
