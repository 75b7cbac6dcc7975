"""`kernelband capture`: run a user's program unchanged, record its Triton launches, and write one ordinary task
file per entry function that took the most device time.

Two processes. The captured program runs in a child (`boot`), where `record` watches every launch through
Triton's launch hooks (the interpreter has none: there it wraps the interpreter's launch) and `describe` keeps
the arguments of each new signature. The child writes what it saw (`records`) and the kept tensors to a raw
directory. KernelBand's own process (`run`) reads them, `plan` picks each task's shapes, and `writer` writes
the task files; `sources` says whether an entry's file can be a task's module. The harness of a written task
builds its inputs with `inputs`, in the evaluator's workers.
"""
