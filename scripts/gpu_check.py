"""Does pelab fill a GPU? ``python scripts/gpu_check.py [--device cpu] [--quick]``: one table,
each row printed as it finishes, each target beside its figure, exit status 1 on a miss or a
failed row (``benchmarks/gpu_check.py``); ``--help`` lists the options."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the repository (benchmarks/) and src/: it runs where pelab is not installed (a GPU machine
# with torch and Lightning but no package index)
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from benchmarks.gpu_check import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli())
