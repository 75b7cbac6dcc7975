"""Policies: which arms (parent kernel, strategy) to pull next. `base` holds the Policy protocol and the registry
(`POLICIES`, `make_policy`); one module per family of policies."""
