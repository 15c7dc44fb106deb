"""A small GPT trained character by character on a text shipped with lezero (its own architecture
notes, docs/architecture.md), compiled whole with ``lz.jit.compile_train_step``, sampling text with
``lz.multinomial``; the same model in PyTorch, from the same weights on the same batches, is the peer.

    .venv/bin/python examples/gpt.py                      # 300 steps, then the torch copy, then a sample
    .venv/bin/python examples/gpt.py --steps 50 --no-torch --dropout 0.1

The model is nanoGPT's shape: token and position embeddings, pre-norm blocks of causal
self-attention (``F.scaled_dot_product_attention(is_causal=True)``) and a GELU MLP, dropout on the
attention weights and the residual branches, a final LayerNorm and a linear head. ``GPT`` is written
once against a framework (``build_gpt(lz)`` or ``build_gpt(torch)``): the same source is a lezero
model and a PyTorch model with the same parameter names, so one state dict moves across.

With dropout 0 (the default when comparing) both frameworks compute the same function on the same
batches and their loss curves agree to float32 rounding; with dropout, each draws its own masks and
the curves agree only in trend.  Sampling runs the traced model (``lz.jit.trace``) on a fixed window
of ``block_size`` characters, left-padded, so one compiled graph serves every step.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time

import numpy as np

import lezero as lz

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import training_log  # noqa: E402

CORPUS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def build_gpt(fw):
    """The GPT classes over framework ``fw`` (``lezero`` or ``torch``): the same code for both."""
    nn, F = fw.nn, fw.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self, d_model, n_head, dropout):
            super().__init__()
            self.n_head, self.dropout = n_head, dropout
            self.c_attn = nn.Linear(d_model, 3 * d_model)
            self.c_proj = nn.Linear(d_model, d_model)
            self.resid_dropout = nn.Dropout(dropout)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (z.reshape(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                               is_causal=True)
            return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))

    class Block(nn.Module):
        def __init__(self, d_model, n_head, dropout):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d_model)
            self.attn = CausalSelfAttention(d_model, n_head, dropout)
            self.ln_2 = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model),
                                     nn.Dropout(dropout))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self, vocab_size, block_size=32, d_model=64, n_head=4, n_layer=2, dropout=0.0):
            super().__init__()
            self.block_size = block_size
            self.wte = nn.Embedding(vocab_size, d_model)
            self.wpe = nn.Embedding(block_size, d_model)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList([Block(d_model, n_head, dropout) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab_size, bias=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.drop(self.wte(idx) + self.wpe(fw.arange(t)))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return GPT


def language_model_loss(fw):
    """Cross-entropy of next-character logits ``(B, T, V)`` against targets ``(B, T)``."""
    def loss(logits, targets):
        return fw.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return loss


class CharData:
    """The corpus as character ids, and seeded random batches of ``block_size`` windows."""

    def __init__(self, text: str, block_size: int, seed: int = 0):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        self.ids = np.array([self.index[c] for c in text], np.int64)
        self.block_size = block_size
        self.rng = np.random.default_rng(seed)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def batch(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        starts = self.rng.integers(0, len(self.ids) - self.block_size - 1, batch_size)
        x = np.stack([self.ids[s:s + self.block_size] for s in starts])
        y = np.stack([self.ids[s + 1:s + 1 + self.block_size] for s in starts])
        return x, y

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)


def train_lezero(model, batches, lr: float, writer=None, progress: bool = False):
    """Losses and seconds per step of ``model`` trained on ``batches`` by one compiled step;
    ``writer`` (a SummaryWriter) gets each step's loss and the learning rate; ``progress``: a bar."""
    optimizer = lz.optim.AdamW(model.parameters(), lr=lr)
    step = lz.jit.compile_train_step(model, language_model_loss(lz), optimizer,
                                     lz.from_numpy(batches[0][0]), lz.from_numpy(batches[0][1]))
    losses, times = [], []
    for i, (x, y) in enumerate(training_log.steps(batches, len(batches), "gpt", progress)):
        start = time.perf_counter()
        losses.append(step(lz.from_numpy(x), lz.from_numpy(y)).item())
        times.append(time.perf_counter() - start)
        training_log.log_scalars(writer, i, {"train/loss": losses[-1], "train/lr": optimizer.param_groups[0]["lr"]})
    return np.array(losses), times


def train_torch(model, batches, lr: float):
    """The peer: the same loop in PyTorch eager (zero_grad, forward, backward, AdamW)."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    loss_fn = language_model_loss(torch)
    losses, times = [], []
    for x, y in batches:
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    return np.array(losses), times


def torch_copy(model, dropout: float):
    """The PyTorch GPT with ``model``'s weights (the same parameter names)."""
    import torch

    copy = build_gpt(torch)(model.wte.num_embeddings, model.block_size, model.wte.embedding_dim,
                            model.blocks[0].attn.n_head, len(model.blocks), dropout)
    copy.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy()) for k, v in model.state_dict().items()})
    return copy


def sample(model, data: CharData, prompt: str, n: int, temperature: float = 0.8, seed: int = 0) -> str:
    """``n`` characters after ``prompt``, each drawn with ``lz.multinomial`` from the traced model's
    last-position distribution over a left-padded window of ``block_size`` characters."""
    lz.manual_seed(seed)
    model.eval()
    window = data.block_size
    traced = lz.jit.trace(model, example_inputs=lz.zeros(1, window, dtype=lz.int64))
    ids = [data.index[c] for c in prompt if c in data.index] or [0]
    for _ in range(n):
        context = ids[-window:]
        x = np.full((1, window), context[0], np.int64)
        x[0, window - len(context):] = context
        logits = traced(lz.from_numpy(x))[0, -1] / temperature
        ids.append(int(lz.multinomial(logits.softmax(-1), 1).item()))
    return data.decode(ids)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch copy")
    training_log.add_arguments(parser)
    args = parser.parse_args()
    writer = training_log.open_writer(args, "gpt")

    data = CharData(CORPUS.read_text(), args.block_size)
    batches = [data.batch(args.batch_size) for _ in range(args.steps)]
    lz.manual_seed(0)
    model = build_gpt(lz)(data.vocab_size, args.block_size, dropout=args.dropout)
    peer = None if args.no_torch else torch_copy(model, args.dropout)
    print(f"corpus {len(data.ids)} characters, vocabulary {data.vocab_size}; "
          f"{sum(p.numel() for p in model.parameters())} parameters; {args.steps} steps of {args.batch_size}x"
          f"{args.block_size}; uniform loss {math.log(data.vocab_size):.3f}")
    start = time.perf_counter()
    losses, times = train_lezero(model, batches, args.lr, writer=writer, progress=args.progress)
    if writer is not None:
        writer.close()
    print(f"lezero compiled step: first (compiling) {time.perf_counter() - start - sum(times[1:]):.1f} s, "
          f"then {1e3 * np.median(times[1:]):.2f} ms/step; loss {losses[0]:.3f} -> {losses[-10:].mean():.3f}")
    if peer is not None:
        torch_losses, torch_times = train_torch(peer, batches, args.lr)
        print(f"torch eager step:     {1e3 * np.median(torch_times[1:]):.2f} ms/step; "
              f"loss {torch_losses[0]:.3f} -> {torch_losses[-10:].mean():.3f}; "
              f"lezero/torch step time {np.median(times[1:]) / np.median(torch_times[1:]):.2f}; "
              f"largest loss difference {np.abs(losses - torch_losses).max():.2e}")
    print("sample:", repr(sample(model, data, "The compiler", 120)))


if __name__ == "__main__":
    main()
