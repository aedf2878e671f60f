"""Code systems: ICD-9 and ICD-10-CM/PCS dot rules, titles, chapters and hierarchy (pure functions).

Never imports the MIMIC readers, `prepare` or the synthetic generators (a contract in pyproject.toml)."""
