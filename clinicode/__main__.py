"""`python -m clinicode` runs the CLI (also what `torchrun -m clinicode` needs)."""

from clinicode.cli import main

main()
