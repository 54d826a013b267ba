"""From runs to tables and figures: ``collect`` reads ``results.json`` files (or W&B runs) into
pandas frames, ``table`` aggregates seeds into ablation tables, ``plots`` draws them, ``report``
is ``scripts/make_table.py`` (``wandb_summary`` logs its result), and ``sweep`` reports a
finished Hydra sweep. It reads results only and builds no model:
drawing an encoding is ``pelab.inspect``."""
