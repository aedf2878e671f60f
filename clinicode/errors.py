"""Exceptions that carry a one-line, user-facing message (what was given, what was expected, the fix)."""


class ClinicodeError(Exception):
    """Base class: the CLI prints the message on one line and exits with status 1."""


class DataFormatError(ClinicodeError):
    """An input file or folder is missing, unreadable or has the wrong shape."""


class ConfigError(ClinicodeError):
    """An option or configuration value is out of range or unknown."""


class CheckpointError(ClinicodeError):
    """A checkpoint folder is missing pieces, damaged, or its pieces disagree."""
