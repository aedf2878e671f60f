"""Synthetic MIMIC-III (`mimic3`) and MIMIC-IV (`mimic4`) tables for the demo and the tests; no MIMIC inside."""
