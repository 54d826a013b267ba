"""``python -m benchmarks [options]``: the same as ``python scripts/benchmark.py``."""

from benchmarks.main import main

main()
