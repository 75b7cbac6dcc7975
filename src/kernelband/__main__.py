"""`python -m kernelband` is the `kernelband` command."""

from kernelband.cli import main

main()
