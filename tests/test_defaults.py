"""The defaults a user gets without naming them."""

from __future__ import annotations


def test_the_default_policy_is_named_in_one_place():
    """`optimize` and `bench` default to DEFAULT_POLICY, as does the API."""
    import inspect

    from kernelband import api
    from kernelband.cli.bench import bench_cmd
    from kernelband.cli.optimize import optimize_cmd
    from kernelband.policies.base import DEFAULT_POLICY, POLICIES

    assert DEFAULT_POLICY in POLICIES
    assert inspect.signature(optimize_cmd).parameters["policy"].default.default == DEFAULT_POLICY
    assert inspect.signature(bench_cmd).parameters["policies"].default.default == DEFAULT_POLICY
    assert inspect.signature(api.optimize).parameters["policy"].default == DEFAULT_POLICY
