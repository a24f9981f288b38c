"""Generated models at the shapes of the engine's pair (the 27B ``qwen35`` target, its DFlash drafter, a 35B-A3B-class
``qwen35moe`` file): real widths and depth, quantized as the engine's files are, random weights written straight into
valid blocks; a reduced set of the same per-layer shapes for the CPU. :mod:`ci.gates.shapes.spec` holds the figures
and their sources."""
