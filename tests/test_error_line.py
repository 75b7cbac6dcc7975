"""The one line of a worker's traceback that goes into an outcome's detail and a dropped shape's note."""
from kernelband.evaluation.context import error_line

CUDA_FAULT = """Traceback (most recent call last):
  File "src/kernelband/worker/main.py", line 336, in op_run
    out = self.harness.call(shape)
torch.AcceleratorError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
"""

CHAINED = """Traceback (most recent call last):
  File "k.py", line 3, in f
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "k.py", line 5, in f
ValueError: BLOCK_SIZE must be a power of 2
"""


def test_the_error_not_the_advice_after_it():
    assert error_line(CUDA_FAULT) == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


def test_the_last_exception_of_a_chain():
    assert error_line(CHAINED) == "ValueError: BLOCK_SIZE must be a power of 2"


def test_text_without_an_exception_line_gives_its_last_line():
    assert error_line("compiling\nptxas fatal: out of registers\n") == "ptxas fatal: out of registers"
    assert error_line("") == "(no message)"


SYNTAX = """Traceback (most recent call last):
  File "/home/user/src/kernelband/worker/main.py", line 199, in op_load
    module = harness_mod.import_file(module_name, path)
  File "/tmp/w-1/kb_reference.py", line 11
    mask = offsets < n)
                      ^
SyntaxError: unmatched ')'
"""


def test_a_syntax_error_names_its_line():
    assert error_line(SYNTAX) == "SyntaxError: unmatched ')' (line 11)"
