"""From runs to tables and figures: ``collect`` reads ``results.json`` files (or W&B runs) into
pandas frames, ``table`` aggregates seeds into ablation tables, ``plots`` draws them, ``report``
is ``scripts/make_table.py`` (``wandb_summary`` logs its result), and ``sweep`` reports a
finished Hydra sweep. ``inspect_pe`` (``scripts/inspect_pe.py``) draws an untrained encoding
with ``pe_figures``: the one module here that builds models."""
