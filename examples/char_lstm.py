"""A character-level LSTM language model trained on a text shipped with lezero (the US Declaration
of Independence, public domain: examples/data/declaration_of_independence.txt), printing the loss,
then sampling text one character at a time from the carried LSTM state.

    .venv/bin/python examples/char_lstm.py                   # 300 steps of 16 windows of 64 characters
    .venv/bin/python examples/char_lstm.py --steps 50 --hidden 64 --eager

The model: an embedding, a two-layer ``lz.nn.LSTM`` (batch_first) and a linear head over the
vocabulary, trained with Adam on next-character cross-entropy.  The LSTM's time loop is
``lz.scan``: compiled (the default, ``lz.jit.compile_train_step``) it is one ``lz.for`` op per
layer and its gradient a reverse ``lz.for``; eagerly (``--eager``) a Python loop whose steps
autograd records, so ``loss.backward()`` runs back through it with nothing special.
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
from gpt import CharData  # noqa: E402  (the GPT example's character ids and random windows)
import training_log  # noqa: E402

TEXT = pathlib.Path(__file__).resolve().parent / "data" / "declaration_of_independence.txt"


class CharLSTM(lz.nn.Module):
    def __init__(self, vocab_size: int, embedding: int = 32, hidden: int = 128, layers: int = 2,
                 dropout: float = 0.0):
        super().__init__()
        self.embed = lz.nn.Embedding(vocab_size, embedding)
        self.lstm = lz.nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True, dropout=dropout)
        self.head = lz.nn.Linear(hidden, vocab_size)

    def forward(self, ids, state=None):
        """Logits ``N x T x vocab`` for ids ``N x T``, and the LSTM's final ``(h, c)``."""
        out, state = self.lstm(self.embed(ids), state)
        return self.head(out), state


def train(model: CharLSTM, data: CharData, steps: int, batch_size: int, lr: float, report_every: int = 25,
          compiled: bool = True, writer=None, progress: bool = False):
    """Adam on next-character cross-entropy, gradients clipped to norm 1; returns the loss of every
    step.  ``compiled``: the whole step as one function (``lz.jit.compile_train_step``: the LSTM's
    loops stay ``lz.for`` ops, their gradients reverse ``lz.for`` ops); else eager (``backward``).
    ``writer`` (a SummaryWriter) gets each step's loss and the learning rate; ``progress``: a bar."""
    optimizer = lz.optim.Adam(model.parameters(), lr=lr)
    vocab = data.vocab_size

    def loss_fn(out, targets):
        return lz.nn.functional.cross_entropy(out[0].reshape(-1, vocab), targets.reshape(-1))

    def eager_step(inputs, targets):
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        lz.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    batches = [tuple(lz.from_numpy(a) for a in data.batch(batch_size)) for _ in range(steps)]
    model.train()
    start = time.perf_counter()
    step = eager_step
    if compiled and batches:
        step = lz.jit.compile_train_step(model, loss_fn, optimizer, batches[0][:1], batches[0][1],
                                         dynamic_batch=False, clip_grad_norm=1.0)
        print(f"compiled the training step in {time.perf_counter() - start:.1f} s", flush=True)
    losses = []
    for i, (inputs, targets) in enumerate(training_log.steps(batches, steps, "char_lstm", progress)):
        losses.append(step(inputs, targets).item())
        training_log.log_scalars(writer, i, {"train/loss": losses[-1], "train/lr": optimizer.param_groups[0]["lr"]})
        if report_every and (i % report_every == 0 or i == steps - 1):
            print(f"step {i:4d}  loss {losses[-1]:.3f}  ({time.perf_counter() - start:.1f} s)", flush=True)
    return np.array(losses)


def sample(model: CharLSTM, data: CharData, prompt: str, n: int, temperature: float = 0.8, seed: int = 0) -> str:
    """``n`` characters after ``prompt``: the prompt read in one call, then one character per
    call with the LSTM state carried (no window: the state is the whole history)."""
    lz.manual_seed(seed)
    model.eval()
    ids = [data.index[c] for c in prompt if c in data.index] or [0]
    with lz.no_grad():
        logits, state = model(lz.from_numpy(np.array([ids], np.int64)))
        for _ in range(n):
            probabilities = (logits[0, -1] / temperature).softmax(-1)
            ids.append(int(lz.multinomial(probabilities, 1).item()))
            logits, state = model(lz.from_numpy(np.array([[ids[-1]]], np.int64)), state)
    return data.decode(ids)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=64, help="characters per training window")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eager", action="store_true", help="train eagerly (backward) instead of compiled")
    training_log.add_arguments(parser)
    args = parser.parse_args()
    writer = training_log.open_writer(args, "char_lstm")

    data = CharData(TEXT.read_text(), args.length)
    lz.manual_seed(0)
    model = CharLSTM(data.vocab_size, hidden=args.hidden, layers=args.layers, dropout=args.dropout)
    print(f"text {len(data.ids)} characters, vocabulary {data.vocab_size}; "
          f"{sum(p.numel() for p in model.parameters())} parameters; uniform loss {math.log(data.vocab_size):.3f}")
    losses = train(model, data, args.steps, args.batch_size, args.lr, compiled=not args.eager, writer=writer,
                   progress=args.progress)
    if writer is not None:
        writer.close()
    print(f"loss {losses[:10].mean():.3f} (first 10 steps) -> {losses[-10:].mean():.3f} (last 10)")
    print("sample:", repr(sample(model, data, "We hold these truths", 200)))


if __name__ == "__main__":
    main()
