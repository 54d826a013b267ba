"""Does pelab fill a GPU? ``python scripts/gpu_check.py [--device cpu] [--quick]``: one table
(``benchmarks/gpu_check.py``); ``--help`` lists the options."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks/

from benchmarks.gpu_check import main  # noqa: E402

if __name__ == "__main__":
    main()
