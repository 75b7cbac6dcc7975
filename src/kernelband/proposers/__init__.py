"""Proposers: a new kernel source for an arm (parent kernel, strategy). `base` holds the Proposer protocol;
`llm` asks a language model; `rewriter` is the built-in source rewriter."""
