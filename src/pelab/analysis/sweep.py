"""The end of a sweep (``python scripts/train.py -m ...``, or ``scripts/eval.py -m``): a Hydra
callback that counts the jobs and their runs by status (a job of ``seeds``/``learning_rates``
holds one run per member), lists every run that did not complete with its error, counts the
completed runs that learned their task and names those that did not (``pelab.competence``; the
first ``NAMED``, then how many more),
prints the command that makes the table, and ends the process with exit status 1 if any job did
not complete."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pelab.record import COMPLETED, FAILED, INTERRUPTED
from pelab.utils.console import duration

NAMED = 5  # the not-learned runs a summary names; ``make_table.py --list`` shows every one
ENDED = (FAILED, INTERRUPTED, COMPLETED)  # how a job can end, worst first (a stack: its worst)


class SweepSummary(Callback):
    """Registered in ``configs/hydra/default.yaml`` (``hydra.callbacks``); the summary runs in the
    process that launched the sweep, whatever the launcher; after each job (in the process that
    ran it) a progress line: jobs done of the grid, failed, and the time left at the pace so
    far."""

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            try:
                self.progress(Path(HydraConfig.get().sweep.dir))
            except Exception as error:  # progress is a courtesy: never fail a job for it
                print(f"sweep progress: unknown ({error!r})", file=sys.stderr)

    def progress(self, sweep_dir: Path) -> None:
        """``sweep progress: 12/66 jobs done (4 failed), ETA 9 min`` on stderr: the jobs of the
        sweep's grid with a completed or failed record, timed from the sweep's start
        (``multirun.yaml``). An interrupted job is not done: it resumes when the sweep runs
        again (``(4 failed, 1 interrupted, to resume)``; a re-run sweep's job that ends before it
        resumes sees its record still say so)."""
        from pelab.analysis.collect import directory_records
        from pelab.analysis.sweep_grid import sweep_jobs

        multirun = sweep_dir / "multirun.yaml"
        grid = OmegaConf.load(multirun)
        if OmegaConf.select(grid, "hydra.job.config_name", default="train") != "train":
            return  # an evaluation sweep: its jobs are not training runs
        total = len(sweep_jobs(grid))
        status: dict[str, str] = {}  # job -> how it ended (a stack: its worst member's)
        for record in directory_records(sweep_dir):
            if record["status"] in ENDED:
                job = str(record.get("job"))
                status[job] = min(status.get(job, COMPLETED), record["status"], key=ENDED.index)
        failed = sum(v == FAILED for v in status.values())
        interrupted = sum(v == INTERRUPTED for v in status.values())
        done = len(status) - interrupted
        ended = f"{failed} failed" + (
            f", {interrupted} interrupted, to resume" if interrupted else ""
        )
        elapsed = time.time() - multirun.stat().st_mtime
        left = f", ETA {duration(elapsed / done * (total - done))}" if 0 < done < total else ""
        print(f"sweep progress: {done}/{total} jobs done ({ended}){left}", file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from pelab.analysis.collect import directory_records, eval_records
        from pelab.analysis.frames import runs_frame
        from pelab.record import job_key

        sweep_dir = Path(config.hydra.sweep.dir)
        evaluation = OmegaConf.select(config, "hydra.job.config_name") == "eval"
        if evaluation:  # one job per record, each linking to it
            records = eval_records(sweep_dir, as_trained=False) + _unrecorded(sweep_dir)
        else:
            records = directory_records(sweep_dir)
        runs = runs_frame(records)
        failed = runs[runs["status"] != COMPLETED]
        counts = ", ".join(f"{n} {status}" for status, n in runs["status"].value_counts().items())
        # a job: its directory, or for one never started its overrides (one record per member)
        jobs = len(
            {
                job_key(r["overrides"]) if r["status"] == "missing" else r.get("job")
                for r in records
            }
        )
        members = not evaluation and 0 < jobs < len(runs)  # a stack's job: a record per member
        unit = "runs" if members else "jobs"
        size = f"{jobs} jobs ({len(runs)} runs)" if members else f"{len(runs)} jobs"
        lines = [f"Sweep {sweep_dir}: {size}: {counts}"]
        for _, run in failed.iterrows():
            error = str(run["error"]).split("\n")[0]
            lines.append(f"  {run['status']}: {Path(run['source']).name}: {error}")
        judged = runs[(runs["status"] == COMPLETED) & runs["learned"].notna()]
        if not evaluation and len(judged):  # runs under a competence budget (learned_at)
            missed = judged[judged["learned"] == False]  # noqa: E712 (object column)
            shown = [_within(Path(source), sweep_dir) for source in missed["source"][:NAMED]]
            more = len(missed) - len(shown)
            names = ", ".join(shown) + (
                f", and {more} more (make_table.py --list)" if more else ""
            )
            lines.append(
                f"learned: {len(judged) - len(missed)} of {len(judged)} completed runs; "
                f"not learned: {len(missed)}" + (f" ({names})" if names else "")
            )
        lines.append(f"Table: python scripts/make_table.py {sweep_dir}")
        print("\n".join(lines), file=sys.stderr)
        if len(failed):
            raise SystemExit(f"{len(failed)} of {len(runs)} {unit} did not complete")


def _unrecorded(sweep_dir: Path) -> list[dict[str, Any]]:
    """The jobs of an evaluation sweep that failed before writing a record (e.g. a checkpoint
    that does not exist): their job directory has no ``results.json``."""
    return [
        {
            "status": FAILED,
            "error": f"no record: it failed before evaluating (see {job / 'eval.log'})",
            "source": str(job),
        }
        for job in sorted(p.parent for p in sweep_dir.glob("*/.hydra"))
        if not (job / "results.json").exists()
    ]


def _within(path: Path, sweep_dir: Path) -> str:
    """``path`` relative to the sweep (a member: ``<job>/seed_<k>``)."""
    return str(path.relative_to(sweep_dir)) if path.is_relative_to(sweep_dir) else path.name
