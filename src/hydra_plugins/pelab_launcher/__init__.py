"""pelab's Hydra launcher plugin: ``hydra/launcher=parallel`` (``pool_launcher.PoolLauncher``)."""
