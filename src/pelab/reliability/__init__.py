"""What keeps long runs and overnight sweeps safe: exact resume after a kill, a checkpoint on
SIGTERM, a failed status instead of hours of NaN, checks of checkpoints and settings before any
training, and skipping jobs a sweep already completed. ``docs/reliability.md`` lists each promise
and the test that proves it."""
