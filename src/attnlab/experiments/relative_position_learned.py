"""relative-position-learned: with the sinusoidal table, attention trained at positions < P
attends by offset at positions it never saw; learned absolute embeddings do not.

Article 001: 「$PE_{pos+k}$ 能表示为 $PE_{pos}$ 的线性组合，这正是模型能学到相对位置的关键」. Since
PE[pos − k] = M_{−k}·PE[pos] with one matrix for every pos (``pe-relative-position``), a
query projection W_q = M_{−k} (and W_k = I) scores PE[pos]·… highest at key pos − k at
every position, seen in training or not. Whether training finds such a solution is
measured here.

The task: copy the token k positions back (output at t = token at t − k). A one-layer
``attnlab.nn.MultiHeadAttention`` (one head, causal) whose queries and keys read only the
position encodings and whose values read only the tokens, followed by a linear readout, is
trained on windows of L tokens placed at absolute positions < P, then tested on windows
placed at positions P … 8P that it never saw. The same model with learned absolute
position embeddings (``nn.Embedding``: the rows of unseen positions are never trained)
is trained the same way. The sinusoidal model whose queries and keys read
token + position (the standard input) is trained too: there the token content interferes
with the positional scores, and generalisation is only partial.

Controls (null models, trained or not exactly as the model they stand beside): the same
model trained the same way on the sinusoidal rows in a fixed random order
(``"shuffled"``: the same vectors, no linear shift between neighbouring positions) for the
accuracy and the attention peak on unseen positions; the same model at initialisation for
the accuracy on the trained positions and for the token + position model; the
learned-embedding model on its own trained positions for its failure on unseen ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.core import positional
from attnlab.nn import MultiHeadAttention

from ._common import check_between, check_ge, check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result

NAME = "relative-position-learned"
CLAIM = ("Trained to copy the token k = 3 back only on windows at absolute positions < 64, "
         "an attnlab attention layer whose queries and keys read only the sinusoidal table "
         "attends to t − k and copies correctly (≥ 95%) at positions 64–511 it never saw, as "
         "the linearity of PE[pos − k] in PE[pos] (one map for every pos) allows; learned "
         "absolute position embeddings (nn.Embedding) trained the same way stay near chance "
         "there. (When queries and keys read token + position, it generalises only partly.)")
CLAIM_ZH = ("只在绝对位置 < 64 的窗口上训练“复制 k = 3 个位置之前的词元”，查询和键只读取正弦"
            "位置编码的 attnlab 注意力层，在从未见过的位置 64–511 上仍然关注 t − k 并正确复制"
            "（≥ 95%），这正是 PE[pos − k] 对 PE[pos] 的线性关系（对所有 pos 是同一个映射）所允许"
            "的；用同样方式训练的可学习绝对位置嵌入（nn.Embedding）在这些位置上接近随机水平。"
            "（若查询和键读取词元 + 位置，则只能部分泛化。）")

ZH: dict[str, str] = {
    # checks
    "accuracy on the trained positions < {}": "训练过的位置 < {} 上的准确率",
    "attention peak at t − {} on unseen positions": "在未见过的位置上注意力峰值落在 t − {} 的比例",
    "learned absolute embeddings: accuracy on unseen positions":
        "可学习绝对位置嵌入：未见过的位置上的准确率",
    "token + position in q, k: accuracy on unseen positions (partial)":
        "q、k 读取词元 + 位置时：未见过的位置上的准确率（部分泛化）",
    # table
    "positions": "位置编码",
    "q, k read": "q、k 读取的输入",
    "sinusoidal table": "正弦位置编码表",
    "learned nn.Embedding": "可学习的 nn.Embedding",
    "shuffled sinusoidal table": "行被打乱的正弦位置编码表",
    "positions only": "只读位置",
    "token + position": "词元 + 位置",
    "accuracy, trained positions < {}": "准确率，训练过的位置 < {}",
    "accuracy, unseen {}–{}": "准确率，未见过的位置 {}–{}",
    "attention peak at t − {} (unseen)": "注意力峰值在 t − {}（未见过的位置）",
    # figure
    "window start position": "窗口起始位置",
    "copy accuracy": "复制准确率",
    "trained on positions < {}": "训练位置 < {}",
    "sinusoidal, q/k from positions": "正弦编码，q/k 来自位置",
    "learned embedding, q/k from positions": "可学习嵌入，q/k 来自位置",
    "sinusoidal, q/k from token + position": "正弦编码，q/k 来自词元 + 位置",
    "Accuracy by window position": "不同窗口位置上的准确率",
    "query position t": "查询位置 t",
    "Sinusoidal model: attention at unseen positions": "正弦编码模型：未见过的位置上的注意力",
}

#: What a model's positions are.
POSITIONS = ("sinusoidal", "learned", "shuffled")


@dataclass(frozen=True)
class OffsetConfig:
    vocab: int = 16  # chance accuracy 1/16
    offset: int = 3  # copy the token k = 3 positions back
    window: int = 16  # tokens per training and test window
    train_positions: int = 64  # training windows lie in [0, 64)
    test_positions: int = 512  # test windows lie in [64, 512): never seen
    embed_dim: int = 32
    steps: int = 300  # enough for training accuracy 1 on one thread in about a second
    batch: int = 32
    lr: float = 3e-3


class OffsetModel(nn.Module):
    """Token and position embeddings → one causal attnlab attention head → readout.

    ``positions``: ``"sinusoidal"`` (attnlab's fixed table), ``"learned"``
    (``nn.Embedding``) or ``"shuffled"`` (the sinusoidal rows in a fixed random order).
    ``qk``: ``"positions"`` (queries and keys read the position encodings, values the
    tokens) or ``"mixed"`` (all three read token + position).
    """

    table: Tensor  # the position encodings (a buffer)

    def __init__(self, c: OffsetConfig, positions: str, qk: str = "positions") -> None:
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        if qk not in ("positions", "mixed"):
            raise ValueError(f"qk must be 'positions' or 'mixed', got {qk!r}")
        self.qk = qk
        self.tok = nn.Embedding(c.vocab, c.embed_dim)
        self.pos: nn.Embedding | None = None
        if positions == "learned":
            self.pos = nn.Embedding(c.test_positions, c.embed_dim)
        table = positional.sinusoidal_table(c.test_positions, c.embed_dim)
        if positions == "shuffled":
            table = table[torch.randperm(c.test_positions,
                                         generator=torch.Generator().manual_seed(1))]
        self.register_buffer("table", table, persistent=False)
        self.attn = MultiHeadAttention(c.embed_dim, 1)
        self.readout = nn.Linear(c.embed_dim, c.vocab)

    def encode(self, idx: Tensor) -> Tensor:
        """(B, L) absolute positions -> (B, L, E) position encodings."""
        return self.pos(idx) if self.pos is not None else self.table[idx]

    def forward(self, tokens: Tensor, start: Tensor, need_weights: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        """Logits (B, L, V) for windows of ``tokens`` (B, L) starting at ``start`` (B,)."""
        idx = start[:, None] + torch.arange(tokens.shape[1])
        p, t = self.encode(idx), self.tok(tokens)
        if self.qk == "positions":
            out, w = self.attn(p, p, t, causal=True, need_weights=need_weights)
        else:
            out, w = self.attn(t + p, causal=True, need_weights=need_weights)
        return self.readout(out), w


def _windows(c: OffsetConfig, n: int, lo: int, hi: int, g: torch.Generator
             ) -> tuple[Tensor, Tensor]:
    tokens = torch.randint(0, c.vocab, (n, c.window), generator=g)
    start = torch.randint(lo, hi - c.window + 1, (n,), generator=g)
    return tokens, start


def train(c: OffsetConfig, positions: str, qk: str, seed: int) -> OffsetModel:
    """The model after ``c.steps`` Adam steps on windows at positions < train_positions."""
    with seeded(seed) as g:
        model = OffsetModel(c, positions, qk)
        opt = torch.optim.Adam(model.parameters(), lr=c.lr)
        for _ in range(c.steps):
            tokens, start = _windows(c, c.batch, 0, c.train_positions, g)
            logits, _ = model(tokens, start)
            loss = F.cross_entropy(logits[:, c.offset:].reshape(-1, c.vocab),
                                   tokens[:, :-c.offset].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return model


def untrained(c: OffsetConfig, positions: str, qk: str, seed: int) -> OffsetModel:
    """The model :func:`train` starts from (same seed, same initialisation), untrained."""
    with seeded(seed):
        return OffsetModel(c, positions, qk)


@torch.no_grad()
def evaluate(model: OffsetModel, c: OffsetConfig, lo: int, hi: int, g: torch.Generator,
             n: int = 512) -> tuple[float, float]:
    """(copy accuracy, fraction of rows whose attention peaks at t − k) on ``n`` windows
    placed in [lo, hi), over the positions t ≥ k of each window."""
    tokens, start = _windows(c, n, lo, hi, g)
    logits, w = model(tokens, start, need_weights=True)  # w: (B, 1, L, L)
    k = c.offset
    acc = float((logits[:, k:].argmax(-1) == tokens[:, :-k]).double().mean())
    t = torch.arange(k, c.window)
    peak = float((w[:, 0, k:].argmax(-1) == t - k).double().mean())
    return acc, peak


#: How the table names each kind of positions.
POSITION_NAMES = {"sinusoidal": "sinusoidal table", "learned": "learned nn.Embedding",
                  "shuffled": "shuffled sinusoidal table"}
#: The control model of each kind, in words (English, Chinese).
NULL_EN = {"shuffled": "the same model trained the same way on the sinusoidal rows in a "
                       "fixed random order (no linear shift between positions)",
           "learned": "the same model trained the same way with learned absolute "
                      "embeddings (nn.Embedding)",
           "sinusoidal": "the same model trained the same way on the sinusoidal table"}
NULL_ZH = {"shuffled": "以同样方式训练、但正弦编码表的行按固定随机顺序打乱的同一模型"
                       "（相邻位置之间没有线性平移关系）",
           "learned": "以同样方式训练、使用可学习绝对位置嵌入（nn.Embedding）的同一模型",
           "sinusoidal": "以同样方式训练、使用正弦位置编码表的同一模型"}


@dataclass(frozen=True)
class Copying:
    """:func:`evaluate` on one range of window positions."""

    accuracy: float  # copy accuracy
    peak: float  # fraction of rows whose attention peaks at t − k


@dataclass(frozen=True)
class TrainedModel:
    """One trained model, tested on the trained positions and on unseen ones."""

    positions: str
    qk: str
    trained: Copying  # windows in [0, P)
    near: Copying  # unseen, [P, 2P)
    far: Copying  # unseen, [2P, test_positions)
    unseen: Copying  # unseen, [P, test_positions)

    def cells(self) -> list:
        return [POSITION_NAMES[self.positions],
                "positions only" if self.qk == "positions" else "token + position",
                self.trained.accuracy, self.near.accuracy, self.far.accuracy, self.unseen.peak]


@dataclass(frozen=True)
class AccuracyCurve:
    """Copy accuracy of one model against the window's start position (the figure)."""

    positions: str
    qk: str
    starts: tuple[int, ...]
    accuracy: tuple[float, ...]


@dataclass(frozen=True)
class RelativePositionMeasurement:
    """Every trained model, the untrained null models, and what the figure draws."""

    config: OffsetConfig
    positions: str
    control: str
    models: tuple[TrainedModel, ...]
    init_main: Copying  # the main model at initialisation, trained positions
    init_mixed: Copying | None  # the token + position model at initialisation, unseen
    curves: tuple[AccuracyCurve, ...]  # empty when not drawn
    unseen_weights: Tensor | None  # (L, L) main model's weights on the last window

    def model(self, positions: str, qk: str = "positions") -> TrainedModel:
        return next(r for r in self.models if (r.positions, r.qk) == (positions, qk))

    @property
    def main(self) -> TrainedModel:
        return self.model(self.positions)

    @property
    def null(self) -> TrainedModel:
        return self.model(self.control)

    @property
    def mixed(self) -> TrainedModel | None:
        return self.model("sinusoidal", "mixed") if self.init_mixed is not None else None


@torch.no_grad()
def _figure_data(models: dict, c: OffsetConfig, seed: int, positions: str
                 ) -> tuple[tuple[AccuracyCurve, ...], Tensor]:
    """Accuracy by window start for every model, and the main model's weights on the last
    window of the unseen positions."""
    starts = tuple(range(0, c.test_positions - c.window + 1, 16))
    g = torch.Generator().manual_seed(seed + 2)
    curves = tuple(AccuracyCurve(pos, qk, starts, tuple(
        evaluate(model, c, s, s + c.window, g, n=64)[0] for s in starts))
        for (pos, qk), model in models.items())
    tokens = torch.randint(0, c.vocab, (1, c.window), generator=g)
    _, w = models[positions, "positions"](tokens, torch.tensor([c.test_positions - c.window]),
                                          need_weights=True)
    return curves, w[0, 0]


def measure(
    seed: int = 0,
    *,
    config: OffsetConfig = OffsetConfig(),
    positions: str = "sinusoidal",
    mixed: bool = True,
    make: Callable[[OffsetConfig, str, str, int], OffsetModel] = train,
    control: str = "shuffled",
    with_figure: bool = False,
) -> RelativePositionMeasurement:
    """Train and test every model :func:`run` describes (same arguments); ``with_figure``:
    also what the figure draws (accuracy by window position, the attention at unseen ones)."""
    c = config
    if control not in POSITIONS:
        raise ValueError(f"control must be one of {POSITIONS}, got {control!r}")
    if not 0 < c.offset < c.window <= c.train_positions < c.test_positions:
        raise ValueError(f"config must have 0 < offset < window <= train_positions < "
                         f"test_positions, got {c}")
    p, hi = c.train_positions, c.test_positions
    runs = [(positions, "positions")]
    if positions != "learned":
        runs.append(("learned", "positions"))
    if mixed:
        runs.append(("sinusoidal", "mixed"))
    if (control, "positions") not in runs:
        runs.append((control, "positions"))
    models, tested = {}, []
    with torch.enable_grad():
        for pos, qk in runs:
            models[pos, qk] = make(c, pos, qk, seed)
    with seeded(seed + 1) as g:
        for (pos, qk), model in models.items():
            model.eval()
            tested.append(TrainedModel(pos, qk, *(Copying(*evaluate(model, c, lo, up, g))
                                                  for lo, up in ((0, p), (p, 2 * p),
                                                                 (2 * p, hi), (p, hi)))))
    # null models: the same ones at initialisation (no training)
    with seeded(seed + 3) as g:
        init_main = Copying(*evaluate(untrained(c, positions, "positions", seed).eval(), c, 0,
                                      p, g))
        init_mixed = (Copying(*evaluate(untrained(c, "sinusoidal", "mixed", seed).eval(), c,
                                        p, hi, g)) if mixed else None)
    curves, weights = (_figure_data(models, c, seed, positions) if with_figure
                      else ((), None))
    return RelativePositionMeasurement(c, positions, control, tuple(tested), init_main,
                                       init_mixed, curves, weights)


def headline_control(m: RelativePositionMeasurement) -> Control:
    """The control model's accuracy on the unseen positions."""
    return Control(NULL_EN[m.control], NULL_ZH[m.control], m.null.unseen.accuracy)


def checks(m: RelativePositionMeasurement) -> list[Check]:
    """Trained positions learnt, attention peaks at t − k unseen, learned embeddings fail
    unseen, token + position partial; each with its null model."""
    c, p, main, base = m.config, m.config.train_positions, m.main, m.model("learned")
    out = [
        check_ge(f"accuracy on the trained positions < {p}", main.trained.accuracy, 0.95,
                 id="trained-positions",
                 control=Control("the same model at initialisation (no training)",
                                 "初始化时的同一模型（未训练）", m.init_main.accuracy)),
        check_ge(f"attention peak at t − {c.offset} on unseen positions", main.unseen.peak,
                 0.95, id="peak-unseen",
                 control=Control(NULL_EN[m.control], NULL_ZH[m.control], m.null.unseen.peak)),
        check_le("learned absolute embeddings: accuracy on unseen positions",
                 base.unseen.accuracy, 0.5, id="absolute-fails-unseen",
                 control=Control(f"the learned-embedding model on its trained positions < {p}",
                                 f"可学习嵌入模型在其训练过的位置 < {p} 上",
                                 base.trained.accuracy)),
    ]
    if m.mixed is not None and m.init_mixed is not None:  # (measured together)
        out.append(check_between("token + position in q, k: accuracy on unseen positions "
                                 "(partial)", m.mixed.unseen.accuracy, 0.3, 0.95,
                                 id="mixed-partial",
                                 control=Control("the token + position model at "
                                                 "initialisation (no training)",
                                                 "初始化时的词元 + 位置模型（未训练）",
                                                 m.init_mixed.accuracy)))
    return out


def table(m: RelativePositionMeasurement) -> tuple[list[str], list[list]]:
    c, p, hi = m.config, m.config.train_positions, m.config.test_positions
    return (["positions", "q, k read", f"accuracy, trained positions < {p}",
             f"accuracy, unseen {p}–{2 * p - 1}", f"accuracy, unseen {2 * p}–{hi - 1}",
             f"attention peak at t − {c.offset} (unseen)"], [r.cells() for r in m.models])


def captions(m: RelativePositionMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese: the task, the control, the token + position
    model."""
    c, p, null, init = m.config, m.config.train_positions, m.null, m.init_main.accuracy
    mixed_en = mixed_zh = ""
    if m.mixed is not None:
        acc = m.mixed.unseen.accuracy
        mixed_en = (f" When queries and keys read token + position (the standard input), "
                    f"accuracy on unseen positions is {acc:.2f}: the tokens interfere with "
                    f"the positional scores.")
        mixed_zh = (f" 当查询和键读取词元 + 位置（标准输入）时，未见过的位置上的准确率为 "
                    f"{acc:.2f}：词元内容干扰了位置分数。")
    en = (f"Copy the token {c.offset} back; vocabulary {c.vocab} (chance {1 / c.vocab:.3f}); "
          f"windows of {c.window} tokens; one causal head, E = {c.embed_dim}; Adam lr {c.lr}, "
          f"batch {c.batch}, {c.steps} steps on windows at positions < {p}; tested on 512 "
          f"windows per range. Control, {NULL_EN[m.control]}: accuracy "
          f"{null.unseen.accuracy:.2f} on the unseen positions ({null.trained.accuracy:.2f} on "
          f"the trained ones); at initialisation the model copies {init:.2f} of the trained "
          "positions.")
    zh = (f"任务：复制 {c.offset} 个位置之前的词元；词表大小 {c.vocab}（随机水平 "
          f"{1 / c.vocab:.3f}）；每个窗口 {c.window} 个词元；单个因果注意力头，"
          f"E = {c.embed_dim}；Adam 学习率 {c.lr}，批大小 {c.batch}，在位置 < {p} 的"
          f"窗口上训练 {c.steps} 步；每个范围用 512 个窗口测试。对照（{NULL_ZH[m.control]}）："
          f"在未见过的位置上准确率为 {null.unseen.accuracy:.2f}（训练过的位置上为 "
          f"{null.trained.accuracy:.2f}）；初始化时模型在训练过的位置上的准确率为 {init:.2f}。")
    return en + mixed_en, zh + mixed_zh


def run(
    seed: int = 0,
    *,
    config: OffsetConfig = OffsetConfig(),
    positions: str = "sinusoidal",
    mixed: bool = True,
    plot: bool = True,
    make: Callable[[OffsetConfig, str, str, int], OffsetModel] = train,
    control: str = "shuffled",
) -> Result:
    """Train the ``positions`` model (and the learned-embedding baseline, the ``control``
    model, and with ``mixed`` the token + position model); test on windows at positions
    never seen.

    Wrong variants: ``positions="learned"`` or ``positions="shuffled"`` must fail; so must
    the model as its own control (``control=positions``).
    """
    m = measure(seed, config=config, positions=positions, mixed=mixed, make=make,
                control=control, with_figure=plot)
    caption, caption_zh = captions(m)
    p, hi, name = config.train_positions, config.test_positions, POSITION_NAMES[positions]
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"copy accuracy of the {positions} model on unseen positions {p}–{hi - 1}",
        quantity_zh=f"{ZH.get(name, name)}模型在未见过的位置 {p}–{hi - 1} 上的复制准确率",
        measured=m.main.unseen.accuracy, expected=0.95, tolerance=0.0, relation=">=",
        checks=checks(m), control=headline_control(m), table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: RelativePositionMeasurement):
    """Accuracy by window position per model; the main model's attention at unseen
    positions."""
    from matplotlib.ticker import MaxNLocator

    if m.unseen_weights is None:
        raise ValueError("the figure needs measure(..., with_figure=True)")
    c, positions = m.config, m.positions
    fig, (ax0, ax1) = new_figure(11, 3.8, ncols=2)
    labels = {("sinusoidal", "positions"): "sinusoidal, q/k from positions",
              ("learned", "positions"): "learned embedding, q/k from positions",
              ("shuffled", "positions"): "shuffled sinusoidal table",
              ("sinusoidal", "mixed"): "sinusoidal, q/k from token + position"}
    colors = {("sinusoidal", "positions"): "#3451b2", ("learned", "positions"): "#b3261e",
              ("shuffled", "positions"): "#a05a00", ("sinusoidal", "mixed"): "#137a3a"}
    for curve in m.curves:
        key = (curve.positions, curve.qk)
        ax0.plot(list(curve.starts), list(curve.accuracy), "-", color=colors[key], lw=1.2,
                 label=labels[key])
    ax0.axvspan(0, c.train_positions, color="#ccc", alpha=0.5,
                label=f"trained on positions < {c.train_positions}")
    ax0.set_ylim(0, 1.05)
    label_axes(ax0, "window start position", "copy accuracy", "Accuracy by window position")
    start = c.test_positions - c.window
    extent = (start - 0.5, start + c.window - 0.5, start + c.window - 0.5, start - 0.5)
    im = ax1.imshow(m.unseen_weights.numpy(), cmap="Blues", vmin=0, vmax=1, extent=extent,
                    interpolation="nearest")
    ax1.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax1.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax1.set_xlabel("key position")
    ax1.set_ylabel("query position t")
    ax1.set_title("Sinusoidal model: attention at unseen positions" if positions ==
                  "sinusoidal" else f"{labels[positions, 'positions']}", fontsize=10)
    fig.colorbar(im, ax=ax1, label="weight")
    return fig
