"""Stage 4, the gates: each a package (``NAME/gate.py`` under :mod:`ci.gates.protocol`) that judges the current build
into a GateResult; :mod:`ci.gates.registry` lists them, and what they share to serve models is in ``serving/`` and
``tiny/``."""
