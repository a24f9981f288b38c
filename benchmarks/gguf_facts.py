"""Reading a GGUF header with a real-size vocabulary: serve's streaming reader against gguf.GGUFReader.

    python benchmarks/gguf_facts.py [--rounds 3]

Writes a header-only GGUF with Qwen's vocabulary size (151,936 tokens, their types, 151,000 merges) to a temporary
directory, then times ``serve.facts.read_facts`` and ``gguf.GGUFReader`` on it, best and median of the rounds.
This is why serve/facts.py walks the header itself instead of using GGUFReader (docs/serve.md).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout: serve/ next to benchmarks/

from common import at_least_one, run_main  # the benchmarks' own helpers, beside this file

from serve.facts import read_facts

TOKENS = 151_936
MERGES = 151_000


def write_vocab_gguf(path: Path) -> None:
    writer = gguf.GGUFWriter(str(path), "qwen3moe")
    writer.add_uint32("qwen3moe.expert_count", 128)
    writer.add_uint32("onebit.hadamard_q4_0", 32)
    writer.add_token_list([f"tok{i}" for i in range(TOKENS)])
    writer.add_token_types([1] * TOKENS)
    writer.add_token_merges([f"a{i} b{i}" for i in range(MERGES)])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def best_median(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=at_least_one, default=3)
    rounds = p.parse_args().rounds
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vocab.gguf"
        write_vocab_gguf(path)
        facts = read_facts(str(path))
        assert (facts.architecture, facts.expert_count, facts.hadamard_q4_0) == ("qwen3moe", 128, True)
        ours = best_median(lambda: read_facts(str(path)), rounds)
        theirs = best_median(lambda: gguf.GGUFReader(path), rounds)
        size = path.stat().st_size
    print(
        f"header of {size / 2**20:.1f} MiB ({TOKENS:,} tokens, {MERGES:,} merges), {rounds} rounds, gguf {importlib.metadata.version('gguf')}"
    )
    print(f"{'':28}{'best':>9}{'median':>9}")
    print(f"{'serve.facts.read_facts':28}{ours[0]:>8.3f}s{ours[1]:>8.3f}s")
    print(f"{'gguf.GGUFReader':28}{theirs[0]:>8.3f}s{theirs[1]:>8.3f}s   {theirs[1] / ours[1]:.0f}x serve's (median)")
    return 0


if __name__ == "__main__":
    run_main(main)
