"""Test and measurement instruments: the fault injector of the fault campaign, and the counter of
host syncs."""
