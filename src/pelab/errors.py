"""The one error type pelab raises for bad input: every module imports it from here."""


class ConfigError(ValueError):
    """A configuration that cannot work, reported before any training starts: the message names
    the bad value and the valid choices."""
