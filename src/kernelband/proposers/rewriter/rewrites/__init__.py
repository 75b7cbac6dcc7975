"""The rewrites, one module each; they read `analysis` and never re-derive its facts."""
