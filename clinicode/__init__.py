"""clinicode: automated ICD coding of clinical notes (LEAM, tfidf-lr and their fusion); its public API is `clinicode.api`."""

__version__ = "0.1.0"
