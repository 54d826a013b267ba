"""pelab's benchmark, one module per section; ``python scripts/benchmark.py --help`` (or
``python -m benchmarks``) runs it (``benchmarks.main``). Numbers and targets:
docs/performance.md."""
