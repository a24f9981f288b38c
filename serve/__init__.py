"""``1bit serve``: the launcher that ships. It composes a llama-server command line and environment from the
GGUF headers, the options and the recipes, prints what it decided, then runs llama-server.

Importable on its own: the standard library, ``gguf`` and ``yaml`` (read only for a launch from a build, which
reads pins.yaml; the shipped wheel declares both), nothing from ci/, nox or pygit2.
"""
