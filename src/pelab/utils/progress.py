"""The training progress bar: Lightning's TQDM bar, with its total and ETA after a resume, and
the training loss read only when it refreshes."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import convert_inf


class StepProgressBar(TQDMProgressBar):
    """``TQDMProgressBar``; a run resumed mid-epoch (pelab trains one epoch of
    ``trainer.max_steps`` batches) gets the bar's total and starts it at the resumed step, so
    its rate and ETA count only this attempt's steps (Lightning skips ``on_train_epoch_start``
    on such a resume, and its bar had neither)."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict:
        """Lightning's, with the training loss last logged, read when the bar refreshes
        (Lightning reads a ``prog_bar`` metric on the host after every step, which makes a GPU
        wait for each step to finish)."""
        metrics = super().get_metrics(trainer, pl_module)
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            metrics["train/loss"] = f"{float(loss):.3g}"
        return metrics

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        if done and self.train_progress_bar is not None:
            bar = self.train_progress_bar
            # the epoch's batches: the resumed loop counts only those left after the checkpoint
            total = trainer.max_steps if trainer.max_steps > 0 else self.total_train_batches
            bar.reset(total=convert_inf(total))
            bar.initial = bar.n = done
            bar.set_description(f"Epoch {trainer.current_epoch}")
            bar.refresh()
