"""pelab's benchmark: ``python scripts/benchmark.py [--quick] [--only SECTION ...]``; ``--help``
lists the options. One file per section in ``benchmarks/`` (``benchmarks.main``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks/

from benchmarks.main import main  # noqa: E402

if __name__ == "__main__":
    main()
