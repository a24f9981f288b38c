"""``python -m serve serve -m MODEL.gguf ...``: the same as the ``1bit`` console script."""

import sys

from serve.errors import NOT_INSTALLED

try:
    from serve.cli import main
except ImportError as exc:  # a Python without the launcher's packages (the docs' `python -m serve` from a checkout)
    sys.exit(NOT_INSTALLED.format(problem=exc.msg, python=sys.executable))

sys.exit(main())
