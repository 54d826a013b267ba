"""From runs to tables and figures: ``collect`` reads ``results.json`` files (or W&B runs) into
pandas frames, ``table`` aggregates seeds into ablation tables, ``plots`` draws them, and
``summary`` reports a finished Hydra sweep."""
