"""The environment a worker process gets: an allow-list of variables, less anything that looks like a secret.

A worker runs untrusted candidate code, so it sees no API keys, tokens or passwords, and its home, temporary
and Triton cache directories are its own.
"""

from __future__ import annotations

import os
import re

_ENV_KEEP = re.compile(
    r"^(PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|TERM|USER|LOGNAME|SHELL|PYTHONPATH|PYTHONHASHSEED|VIRTUAL_ENV|"
    r"LD_LIBRARY_PATH|CUDA_[A-Z_]+|NVIDIA_[A-Z_]+|NCCL_[A-Z_]+|NVSHMEM_[A-Z_]+|TORCH_[A-Z_]+|PYTORCH_[A-Z_]+|"
    r"TRITON_[A-Z_]+|OMP_NUM_THREADS|MKL_NUM_THREADS|CC|CXX)$")
_ENV_SECRET = re.compile(r"(_API_KEY$|TOKEN|SECRET|PASSWORD|CREDENTIAL|_KEY$)", re.IGNORECASE)


def worker_env(workdir: str, mode: str, device_index: int | None) -> dict[str, str]:
    """The environment a worker gets: an allow-list, less anything that looks like a secret."""
    env = {k: v for k, v in os.environ.items() if _ENV_KEEP.match(k) and not _ENV_SECRET.search(k)}
    env.update(HOME=workdir, TMPDIR=workdir, TRITON_CACHE_DIR=os.path.join(workdir, "triton-cache"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)
    if mode == "interpreter":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif device_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(device_index) if "CUDA_VISIBLE_DEVICES" not in os.environ else \
            os.environ["CUDA_VISIBLE_DEVICES"].split(",")[device_index]
    # Our own package must import in the worker even when run from a source tree.
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([src] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def detect_mode() -> str:
    """"gpu" where torch sees a CUDA GPU, else "interpreter" (kernels run in Triton's interpreter on the CPU);
    KERNELBAND_MODE forces either. Light to import: `kernelband capture`'s child asks before importing Triton."""
    forced = os.environ.get("KERNELBAND_MODE")
    if forced in ("gpu", "interpreter"):
        return forced
    try:
        import torch
        return "gpu" if torch.cuda.is_available() else "interpreter"
    except Exception:  # noqa: BLE001
        return "interpreter"
