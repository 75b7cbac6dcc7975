"""A tiny language model's forward steps, built from KernelBand's example kernels and the gathers in
gather.py: token and position embeddings, a residual add with an RMSNorm, the projection onto the (tied)
token embeddings, a softmax and the negative log-likelihood of the next token. Batches come in several
lengths, as text does.

    python examples/tiny_lm/step.py --steps 6                 # run it
    kernelband capture -- python examples/tiny_lm/step.py     # capture its kernels as tasks

Without a GPU it runs in the Triton interpreter (TRITON_INTERPRET=1) at the small default sizes.
"""

import argparse

import torch
import triton
from gather import embedding, token_nll

from kernelband.tasks.examples.add_rmsnorm import add_rmsnorm
from kernelband.tasks.examples.matmul import matmul_kernel
from kernelband.tasks.examples.softmax import softmax


def lm_head(h: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """h @ table.T, the logits against the token embeddings (tied: the table's transposed view, no copy), in
    float16 with float32 accumulation, launched here with the example matmul kernel."""
    w = table.t()
    out = torch.empty((h.shape[0], w.shape[1]), device=h.device, dtype=torch.float16)

    def grid(meta):
        return (triton.cdiv(out.shape[0], meta["BLOCK_M"]) * triton.cdiv(out.shape[1], meta["BLOCK_N"]),)

    matmul_kernel[grid](h, w, out, *out.shape, h.shape[1], *h.stride(), *w.stride(), *out.stride(),
                        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=1)
    return out


class TinyLM:
    def __init__(self, vocab: int, dim: int, max_len: int, device: str, seed: int = 0):
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.tokens = (torch.randn(vocab, dim, generator=g) * dim**-0.5).half().to(device)
        self.positions = (torch.randn(max_len, dim, generator=g) * dim**-0.5).half().to(device)
        self.norm = (1 + 0.1 * torch.randn(dim, generator=g)).half().to(device)

    def step(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        batch, length = ids.shape
        positions = torch.arange(length, device=ids.device).expand(batch, length)
        x = embedding(ids, self.tokens).view(batch * length, -1)
        p = embedding(positions, self.positions).view(batch * length, -1)
        h = add_rmsnorm(x, p, self.norm)
        probs = softmax(lm_head(h, self.tokens).float())
        return token_nll(probs, targets).mean()


def make_batch(step: int, batch: int, length: int, vocab: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Step `step`'s token ids and next-token targets: the same on every run."""
    g = torch.Generator(device="cpu").manual_seed(1000 + step)
    text = torch.randint(0, vocab, (batch, length + 1), generator=g)
    return text[:, :-1].contiguous().to(device), text[:, 1:].contiguous().to(device)


LENGTHS = (16, 8, 12)  # the batches' lengths, in turn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--scale", type=int, default=1, help="multiplies every length (GPU sizes: 64)")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=128)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = TinyLM(args.vocab, args.dim, max(LENGTHS) * args.scale, device)
    for step in range(args.steps):
        length = LENGTHS[step % len(LENGTHS)] * args.scale
        ids, targets = make_batch(step, args.batch, length, args.vocab, device)
        loss = model.step(ids, targets)
        print(f"step {step}: length {length}, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
