"""Synthetic tasks whose solution needs a known attention relation.

Every task is framed decoder-only: one token sequence, the model predicts each next token,
and only the positions whose answer is determined by the input are *scored* (loss and
accuracy are computed there alone). One framing for all tasks means one model family
(:class:`attnlab.GPT`) and one way to look for the heads that learned the relation.

=============  =====================================  =======================================
task           sequence                               relation the model needs
=============  =====================================  =======================================
copy           ``<bos> x1..xn | x1..xn``              offset head: attend n+1 positions back
reverse        ``<bos> x1..xn | xn..x1``              mirror head: attend to position 2n+2-i
sort           ``<bos> x1..xn | sorted(x)``           content head: smallest not yet emitted
induction      ``<bos> s1..sn s1..sn s1..``           previous-token head + induction head
assoc-recall   ``<bos> k1 v1 .. kn vn ? k``           lookup head: the value after key k
modular-add    ``<bos> a + b =`` -> ``(a+b) mod p``   '=' reads both operands; the MLP adds
=============  =====================================  =======================================

``assoc-recall`` trains a GPT with a *token shift* (``TrainConfig.token_shift``, see
:mod:`attnlab.train.tokenshift`): each position's input also holds the token before it, so
each value's input carries its key and one head can do the lookup. Why, measured with the
2-layer, 4-head, 64-dim GPT, batch 64, lr 3e-3 unless noted (held-out accuracy on 8
batches of 64 sequences, 6 pairs, 16 keys, 16 values; chance 0.0625; ``(steps)``):

* Plain GPT: it stays at 0.24-0.28, the accuracy of answering with one of the six values in
  context (loss ~1.7 ~ log 6): 1,500 steps (the old default) 0.244, 15,000 steps 0.26; lr
  1e-3 0.24 (3,000), 1e-2 0.22 (1,750); batch 512 0.28 (1,100); dim 128 0.23 (1,000);
  3 layers 0.25 (1,250); 4 layers, dim 128, 8 heads 0.23 (1,250); rope 0.27 (3,000);
  dropout 0.1 / 0.3 0.26 / 0.27 (2,500); q, k, v initialized 5x larger 0.25 (3,000); seeds
  1 and 2 0.26 (3,000). Fewer pairs do not help: 2 pairs 0.52, 3 pairs 0.37 (4,000 / 3,000),
  i.e. a guess among the values. Six queries per sequence: 0.48 (6,000), from ruling out the
  values already asked for, not from matching keys.
* Curricula: warm-up on periodic key-value sequences (which a GPT learns, like the induction
  task) 0.24 after the switch; periodic sequences mixed in 0.24; an auxiliary loss that
  makes each value predict its key gives a sharp layer-0 previous-token head (0.84) yet 0.27
  (2,000); keys listed in sorted order reach 0.93 (3,000) but only by reading the order
  (0.25 on unsorted keys), so it is not the lookup.
* Why it stalls: the lookup needs a previous-token head in layer 0 writing each key into the
  value after it and a head in layer 1 matching the query key against that (the induction
  circuit). The induction task's sequences repeat, so a diffuse layer-0 head already
  matches there; here each key occurs once and only the exact previous token identifies a
  value, so nothing rewards the previous-token head before the layer-1 match that reads it
  exists (the same lookup on a random sequence of distinct tokens, with no repetition,
  stays at chance: 0.03 after 2,000 steps; the induction task scored at its last position
  only is at 0.84 by step 250). Meanwhile layer 0 learns to copy the values into the
  query position (in the old default run, zeroing its attention output there raises the
  held-out loss from 1.71 to 3.90; layer 1's only to 1.89) and the gradient has no lookup
  to improve.
* With the previous token in the input (token shift) the lookup takes one head and is
  learned in ~100 steps (held-out accuracy 1.0 by step 100 for seeds 0, 1 and 2). The
  default run (400 steps, 6.7 s on one thread at load ~1; the plain GPT's 15,000 steps took
  237 s for 0.26) reaches 1.0, and every layer-0 head is a lookup head: the query key puts
  0.97, 0.95, 0.92 and 0.81 of its attention on the value after the key's earlier
  occurrence (:func:`attnlab.train.heads.score_lookup_heads`; layer 1: <= 0.08).

Data are generated on the fly and are a pure function of ``(seed, split, step)``: the batch
of a step never depends on what ran before, so a resumed run sees exactly the batches an
uninterrupted one would, and each of ``world`` processes takes its slice of the same global
batch.

>>> task = get_task("induction")
>>> b = task.batch(step=0, batch_size=4, seed=0)
>>> tuple(b.inputs.shape), tuple(b.targets.shape), b.scored.dtype
((4, 32), (4, 32), torch.bool)
>>> bool((b.targets[b.scored] >= task.n_specials).all())
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: `attnlab train --help` needs no torch
    import torch
    from torch import Tensor

__all__ = ["Batch", "Task", "TASKS", "get_task", "task_names"]

_SPLITS = {"train": 0, "eval": 1}
_MASK64 = (1 << 64) - 1


def _mix(*parts: int) -> int:
    """SplitMix64 over the parts: a well-spread 63-bit seed from (seed, split, step, ...)."""
    z = 0x9E3779B97F4A7C15
    for p in parts:
        z = (z ^ (int(p) & _MASK64)) & _MASK64
        z = (z + 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
    return z & ((1 << 63) - 1)


@dataclass(frozen=True)
class Batch:
    """One batch: ``inputs`` (B, N) token ids, ``targets`` (B, N) the next tokens,
    ``scored`` (B, N) bool, True where the prediction counts."""

    inputs: Tensor
    targets: Tensor
    scored: Tensor

    def slice(self, rank: int, world: int) -> Batch:
        """This process's contiguous share of the global batch."""
        b = self.inputs.shape[0]
        if b % world:
            raise ValueError(f"batch_size={b} must be divisible by the world size {world}")
        lo, hi = rank * b // world, (rank + 1) * b // world
        return Batch(self.inputs[lo:hi], self.targets[lo:hi], self.scored[lo:hi])


@dataclass(frozen=True)
class Task:
    """A synthetic task. ``symbols[i]`` is the text of token id ``i``: the specials first,
    then the values ``"0" .. str(n_values-1)`` (or letters for keys)."""

    name: str
    relation: str
    specials: tuple[str, ...]
    n_values: int  # data symbols
    seq_len: int  # tokens in the full sequence (inputs and targets are seq_len - 1 long)
    n: int  # the task's length parameter (segment length, pairs, ...)
    default_steps: int  # the default run: reaches its accuracy in about a minute on 2 cores
    default_lr: float
    extra_symbols: tuple[str, ...] = ()  # e.g. letters for assoc-recall keys
    config: tuple[tuple[str, object], ...] = ()  # other TrainConfig defaults of the task

    @property
    def n_specials(self) -> int:
        return len(self.specials)

    @property
    def symbols(self) -> tuple[str, ...]:
        return self.specials + tuple(str(i) for i in range(self.n_values)) + self.extra_symbols

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    @property
    def chance(self) -> float:
        """Accuracy of guessing a uniformly random value at a scored position."""
        return 1.0 / self.n_values

    def special(self, name: str) -> int:
        return self.specials.index(name)

    def batch(self, step: int, batch_size: int, seed: int, split: str = "train") -> Batch:
        """The global batch of ``step``: a pure function of its arguments."""
        import torch
        if split not in _SPLITS:
            raise ValueError(f"split must be one of {sorted(_SPLITS)}, got {split!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        g = torch.Generator().manual_seed(_mix(seed, _SPLITS[split], step))
        seqs, scored = _GENERATORS[self.name](self, batch_size, g, seed, split)
        # position t predicts token t+1; a target is scored where scored[:, t+1]
        return Batch(seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous(),
                     scored[:, 1:].contiguous())

    def describe(self, ids: list[int] | Tensor) -> list[str]:
        """Token ids as their symbols."""
        sym = self.symbols
        return [sym[int(i)] for i in ids]


# --------------------------------------------------------------------------------------
# generators: (task, B, generator, seed, split) -> (seqs (B, seq_len), scored (B, seq_len))
# --------------------------------------------------------------------------------------


def _values(task: Task, shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    import torch
    return torch.randint(task.n_values, shape, generator=g) + task.n_specials


def _seq2seq(task: Task, b: int, g: torch.Generator, transform) -> tuple[Tensor, Tensor]:
    import torch
    n = task.n
    x = _values(task, (b, n), g)  # (B, n)
    bos = torch.full((b, 1), task.special("<bos>"))
    sep = torch.full((b, 1), task.special("|"))
    seqs = torch.cat([bos, x, sep, transform(x)], dim=1)  # (B, 2n+2)
    scored = torch.zeros_like(seqs, dtype=torch.bool)
    scored[:, n + 2:] = True
    return seqs, scored


def _copy(task, b, g, seed, split):
    return _seq2seq(task, b, g, lambda x: x)


def _reverse(task, b, g, seed, split):
    return _seq2seq(task, b, g, lambda x: x.flip(1))


def _sort(task, b, g, seed, split):
    return _seq2seq(task, b, g, lambda x: x.sort(dim=1).values)


def _induction(task, b, g, seed, split):
    # A segment s of n_s distinct values repeated to fill the sequence; n_s varies per
    # sequence, so no fixed positional offset solves it: the model must find the earlier
    # occurrence of the current token and copy what followed it (the induction mechanism).
    import torch
    body = task.seq_len - 1
    lo, hi = max(2, task.n // 2), task.n  # period range
    lengths = torch.randint(lo, hi + 1, (b, 1), generator=g)  # (B, 1)
    segs = torch.argsort(torch.rand(b, task.n_values, generator=g), dim=1) + task.n_specials
    pos = torch.arange(body)[None, :]  # (1, body)
    seqs = torch.empty(b, task.seq_len, dtype=torch.long)
    seqs[:, 0] = task.special("<bos>")
    seqs[:, 1:] = segs.gather(1, pos % lengths)  # s1..sn s1..sn s1..
    # token p is predictable once the token before it has occurred earlier: p >= n_s + 2
    scored = torch.arange(task.seq_len)[None, :] >= lengths + 2
    return seqs, scored


def _assoc_recall(task, b, g, seed, split):
    import torch
    n = task.n
    n_keys = len(task.extra_symbols)
    key0 = task.n_specials + task.n_values
    keys = torch.argsort(torch.rand(b, n_keys, generator=g), dim=1)[:, :n] + key0  # distinct
    vals = _values(task, (b, n), g)
    pick = torch.randint(n, (b, 1), generator=g)
    pairs = torch.stack([keys, vals], dim=2).reshape(b, 2 * n)  # k1 v1 k2 v2 ...
    bos = torch.full((b, 1), task.special("<bos>"))
    qmark = torch.full((b, 1), task.special("?"))
    answer = vals.gather(1, pick)
    seqs = torch.cat([bos, pairs, qmark, keys.gather(1, pick), answer], dim=1)
    scored = torch.zeros_like(seqs, dtype=torch.bool)
    scored[:, -1] = True
    return seqs, scored


def _modular_split(p: int, seed: int) -> tuple[Tensor, Tensor]:
    """All p*p pairs (a, b), split 70/30 into train and held-out by a seeded permutation."""
    import torch
    pairs = torch.cartesian_prod(torch.arange(p), torch.arange(p))  # (p*p, 2)
    perm = torch.randperm(p * p, generator=torch.Generator().manual_seed(_mix(seed, 7)))
    n_train = int(0.7 * p * p)
    return pairs[perm[:n_train]], pairs[perm[n_train:]]


def _modular_add(task, b, g, seed, split):
    import torch
    p = task.n_values
    train, held = _modular_split(p, seed)
    pool = train if split == "train" else held
    ab = pool[torch.randint(len(pool), (b,), generator=g)]  # (B, 2)
    c = (ab[:, 0] + ab[:, 1]) % p
    s = task.n_specials
    seqs = torch.stack([
        torch.full((b,), task.special("<bos>")), ab[:, 0] + s,
        torch.full((b,), task.special("+")), ab[:, 1] + s,
        torch.full((b,), task.special("=")), c + s,
    ], dim=1)
    scored = torch.zeros_like(seqs, dtype=torch.bool)
    scored[:, -1] = True
    return seqs, scored


_GENERATORS = {
    "copy": _copy,
    "reverse": _reverse,
    "sort": _sort,
    "induction": _induction,
    "assoc-recall": _assoc_recall,
    "modular-add": _modular_add,
}

_LETTERS = tuple("abcdefghijklmnopqrstuvwxyz")

TASKS: dict[str, Task] = {
    t.name: t
    for t in [
        Task("copy", "offset head: each output position attends n+1 positions back to its "
             "source", ("<bos>", "|"), 16, 18, 8, 600, 3e-3),
        Task("reverse", "mirror head: output position i attends to input position 2n+2-i",
             ("<bos>", "|"), 16, 18, 8, 600, 3e-3),
        Task("sort", "content head: attend to the smallest input not yet emitted",
             ("<bos>", "|"), 16, 18, 8, 1000, 3e-3),
        Task("induction", "previous-token head (layer 0) + induction head (layer 1): find the "
             "earlier occurrence of the current token and copy the token after it",
             ("<bos>",), 32, 33, 12, 600, 3e-3),
        # 400 steps: accuracy 1.0 from step ~100 (see the module docstring for why the token
        # shift; the plain GPT stays near 0.25 for 15,000 steps)
        Task("assoc-recall", "lookup head: the query key attends to the value after its "
             "earlier occurrence (the token shift puts each key in the next position's "
             "input) and copies that value", ("<bos>", "?"), 16, 16, 6, 400, 3e-3,
             _LETTERS[:16], config=(("token_shift", True),)),
        Task("modular-add", "the '=' position attends to both operands; the MLP computes "
             "(a + b) mod p; held-out pairs are never seen in training",
             ("<bos>", "+", "="), 23, 6, 2, 3000, 3e-3),
    ]
}


def task_names() -> list[str]:
    return list(TASKS)


def get_task(name: str) -> Task:
    """The task called ``name``; ``ValueError`` listing the known ones otherwise."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; expected one of {task_names()}")
    return TASKS[name]
