"""Resuming exactly: the callbacks that make a run safe to kill, which checkpoint it resumes from,
training data that resumes where it stopped, the signals it answers, one writer per run
directory, and skipping what a sweep completed."""
