#!/usr/bin/env bash
# Makes the two ignored folders that a GPU session carries (the device call's carry: [".wheels", ".data"]),
# which a fresh checkout does not have:
#   .wheels/  libcst, the one package of ours the GPU machine's image lacks (its Python is 3.12), at the
#             version installed here;
#   .data/tritonbench_g_tasks.json  the TritonBench-G tasks, found as `kernelband tasks` finds them (the GPU
#             machine gets the working tree, not the shared/ folder beside it). Never committed: .gitignore.
#   bash scripts/gpu/carry.sh     (the project's .venv is used where there is one, else `python`)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=python
[ -x .venv/bin/python ] && py=.venv/bin/python
version=$("$py" -c "from importlib.metadata import version; print(version('libcst'))")
mkdir -p .wheels .data
rm -f .wheels/libcst-*.whl
"$py" -m pip download "libcst==$version" --only-binary=:all: --python-version 3.12 --no-deps -q -d .wheels \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
install -m 0644 "$("$py" -c "from kernelband.tasks import tritonbench; print(tritonbench.locate())")" \
  .data/tritonbench_g_tasks.json
ls -l .wheels .data
