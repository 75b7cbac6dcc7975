"""The built-in rewriter: `proposer.RewriterProposer` draws one variant of a parent kernel from the rewrites of
a strategy. `source` and `syntax` read the module, `knobs` its block sizes, `edits` apply changes, `registry`
names every rewrite (one module each), and `priors` weights them by how often they helped before."""
