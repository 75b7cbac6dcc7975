"""The built-in rewriter: `proposer.RewriterProposer` draws one variant of a parent kernel from the rewrites of
a strategy.

- `analysis/` reads a module once and derives facts about what it computes: its kernels and launches, each
  constexpr's role found by data flow, loops and what they carry, loads and stores, reductions, tl.dot operands,
  each launch's grid as a function of its values, the buffers passed between launches. Nothing there changes
  the source.
- `rewrites/` holds one module per rewrite (and the helpers two of them share). A rewrite reads the facts,
  makes its variants as edits of the parsed module, and, where it cannot, says which fact of meaning is
  missing.
- `edits` applies a variant's edits, `registry` names every rewrite, and `priors` weights them by how often
  they helped before.
"""
