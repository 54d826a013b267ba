"""The checks before any training: settings against the code they configure, and whether evaluation
fits in memory (its peak counted as the model runs)."""
