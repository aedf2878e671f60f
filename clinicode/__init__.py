"""clinicode: automated ICD coding of clinical notes; what a notebook imports is `clinicode.api`."""

__version__ = "0.1.0"
