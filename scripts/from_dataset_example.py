"""Train on your own data, end to end, with a tiny example dataset.

``python scripts/from_dataset_example.py [OVERRIDES...]`` writes the example dataset (strings
of 1-12 letters over ``abcd``; the target is the string without its ``a``, so targets are
ragged and padded) to ``.cache/pelab/examples/drop_a/`` unless it is there, then trains on it:
``python scripts/train.py task=from_dataset task.path=<it> task.train_lengths=[1,8]
task.eval_lengths=[4,8,12] OVERRIDES...``. Any train.py override works (``pe=alibi``,
``model=encoder``, ``trainer.max_steps=500``). For your own data, write a ``datasets.Dataset``
or ``DatasetDict`` with ``save_to_disk`` and pass its directory as ``task.path``
(docs/tasks.md, "Your own data").
"""

import subprocess
import sys
from pathlib import Path

from pelab.tasks.dataset_files import write_example

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".cache" / "pelab" / "examples" / "drop_a"

if __name__ == "__main__":
    if not DATA.exists():
        write_example(DATA)
        print(f"wrote the example dataset to {DATA}")
    command = [
        sys.executable,
        str(ROOT / "scripts" / "train.py"),
        "task=from_dataset",
        f"task.path={DATA}",
        "task.train_lengths=[1,8]",
        "task.eval_lengths=[4,8,12]",
        *sys.argv[1:],
    ]
    sys.exit(subprocess.run(command, check=False).returncode)
