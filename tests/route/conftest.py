from tests.support.serve_fixtures import _route_env, dry_run, gguf_file, serve_error

__all__ = ["_route_env", "dry_run", "gguf_file", "serve_error"]
