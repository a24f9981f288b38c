"""``1bit serve``: the launcher that ships. It composes a llama-server command line and environment from the
GGUF headers, the options and the recipes, prints what it decided, then runs llama-server.

Importable on its own: the standard library and ``gguf``, nothing from ci/, nox or pygit2.
"""
