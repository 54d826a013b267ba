"""From runs to tables and figures: ``collect`` reads run records (``results.json`` files, the
jobs a sweep's grid planned: ``sweep_grid``, or W&B runs: ``wandb_records``), ``frames`` turns
them into pandas frames, ``table`` aggregates seeds into ablation tables (``statistics``: a cell's
numbers, ``cells``: its text, ``render``: the files), ``plots`` draws them, ``report`` is
``scripts/make_table.py`` (``baseline``: the shipped baselines; ``wandb_summary`` logs its
result), and ``sweep`` reports a finished Hydra sweep. It reads results only and builds no model:
drawing an encoding is ``pelab.inspect``."""
