"""pelab's Hydra plugins: ``hydra/launcher=parallel`` (``pool_launcher.PoolLauncher``) and
``hydra/sweeper=checked`` (``checked_sweeper.CheckedSweeper``, the default of ``train.yaml``)."""
