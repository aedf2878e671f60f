"""clinicode: automated ICD coding of clinical notes with LEAM."""

__version__ = "0.1.0"
