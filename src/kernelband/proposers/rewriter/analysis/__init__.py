"""Facts about a kernel module, computed once and read by every rewrite (see the package docstring)."""
