"""Entry point of a worker process: `python -m kernelband.worker --fd N --dir D --mode M`."""

from kernelband.worker.main import main

if __name__ == "__main__":
    main()
