"""``python -m serve serve -m MODEL.gguf ...``: the same as the ``1bit`` console script."""

import sys

from serve.cli import main

sys.exit(main())
