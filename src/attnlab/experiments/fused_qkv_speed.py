"""fused-qkv-speed: is one fused E→3E projection faster than three E→E projections?

Article 001: 「通过 nn.Linear(3*d_model) 一次性计算 QKV，比分开三次计算更快」. Both do the same
arithmetic (3·B·N·E² multiply-adds, counted with ``torch.utils.flop_counter``) and give the
same q, k, v when the fused weight is the three weights stacked. What fusing saves is two
calls and two bias additions, two of the three reads of x, and in the backward pass the sum
of three input gradients (one product instead of three products and two additions). That is
a large share of the time while the matrices are tiny and a few percent once they are not.

Timing on a shared machine: the clock is this thread's CPU time (``time.thread_time``: the
time the machine gives to other processes is not counted; every op runs on this one thread),
the variants run interleaved (their order rotating), calls shorter than 2 ms are timed
in batches, each timing is the median of ``repeats`` samples, and the figure kept is the
minimum of those medians over ``rounds`` (noise only ever adds time). The load average is
reported. The claim counts as holding when the geometric mean over the (size, pass) cases of
the time ratio separate / fused is at least 1.03 *and* the control, the same comparison of
two identical implementations, does not reach it: the separate projections are timed a
second time under another name, interleaved with the other two, and the geometric mean of
separate / separate (twin) must stay below 1.03 (noise alone must not pass the threshold).
Calibration: timing the fused projection against itself the same way on 2 CPUs at a load
average of 9 gave geometric means of 0.998 and 1.013, though single cases ranged over
0.84–1.34: the mean of 12 cases is what noise cannot push to 1.03, not any one case.

The same q, k, v and the same FLOPs hold by construction (the fused weight is the three
weights stacked; a matrix product's multiply-adds do not depend on how its rows are
grouped); each is shown beside the wrong variant the same test must reject: the fused rows
taken in the wrong order (k, q, v), and the fused projection run once for each of q, k, v.

Also timed, for information (article 001: 「官方 nn.Transformer 已经高度优化，
生产环境建议直接使用」): one ``torch.nn.TransformerEncoderLayer`` against attnlab's
``TransformerEncoderLayer`` (in this process) and against the same layer built around
article 001's corrected ``MultiHeadAttention`` (in a fresh interpreter, next to torch's
layer, so that each is reported as a ratio to torch's layer timed in the same process).
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from attnlab.nn import TransformerEncoderLayer

from . import article_listings
from ._common import check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result, fmt_num

NAME = "fused-qkv-speed"
CLAIM = ("Computing Q, K, V with one nn.Linear(d_model, 3·d_model) is faster than three "
         "separate projections.")
CLAIM_ZH = "用一个 nn.Linear(d_model, 3·d_model) 一次算出 Q、K、V，比分三次投影更快。"

#: English -> Chinese for every string a reader sees (check names, table, figure).
ZH: dict[str, str] = {
    "fused and separate give the same q, k, v: max |difference|":
        "融合与分开投影得到的 q、k、v 相同：最大绝对差",
    "|FLOPs(fused) − FLOPs(separate)|": "|FLOPs(融合) − FLOPs(分开)|",
    "separate (twin) (ms)": "分开（孪生副本）（毫秒）",
    "ratio separate / separate (twin)": "时间比 分开 / 分开（孪生副本）",
    "control: separate / separate (twin)": "对照：分开 / 分开（孪生副本）",
    "size": "规模",
    "pass": "计算",
    "fused (ms)": "融合（毫秒）",
    "separate (ms)": "分开（毫秒）",
    "ratio separate / fused": "时间比 分开 / 融合",
    "B = {}, N = {}, E = {}": "B = {}，N = {}，E = {}",
    "forward": "前向",
    "forward+backward": "前向 + 反向",
    "encoder layer: B = {}, N = {}, E = {}, H = {}, ff = {}":
        "编码器层：B = {}，N = {}，E = {}，H = {}，ff = {}",
    "torch nn.TransformerEncoderLayer | attnlab (this process), forward, eval":
        "torch nn.TransformerEncoderLayer | attnlab（本进程），前向，eval 模式",
    "torch nn.TransformerEncoderLayer | article 001's corrected MultiHeadAttention in the same "
    "layer (fresh interpreter)":
        "torch nn.TransformerEncoderLayer | 同样的层中换用文章 001 修正后的 MultiHeadAttention"
        "（全新解释器）",
    "load average (1 min) before | after": "负载均值（1 分钟）运行前 | 运行后",
    "{} CPUs": "{} 个 CPU",
    "equal time": "耗时相同",
    "threshold of the geometric mean": "几何平均的阈值",
    "size B×N×E": "规模 B×N×E",
    "time ratio separate / fused": "时间比 分开 / 融合",
    "Three E→E projections vs one E→3E projection (one CPU thread)":
        "三个 E→E 投影对比一个 E→3E 投影（单个 CPU 线程）",
}

__all__ = ["NAME", "CLAIM", "CLAIM_ZH", "ZH", "SIZES", "MARGIN", "project_fused",
           "project_separate", "project_fused_per_output", "interleaved_times", "run"]

#: (B, N, E): article 001's default (2, 10, 512) first, then tiny to medium projections.
SIZES: tuple[tuple[int, int, int], ...] = (
    (2, 10, 512), (1, 16, 64), (4, 32, 128), (2, 64, 256), (2, 128, 512), (1, 96, 768))
#: "faster": the geometric mean of the time ratios separate / fused is at least this.
MARGIN = 1.03
#: the shortest sample (seconds): short calls are repeated within one sample
SAMPLE = 2e-3
#: the encoder layers compared with torch's: article 001's sizes, a longer sequence.
LAYER_SIZE = (2, 64, 512, 8, 2048)  # B, N, E, H, ff_dim


def project_fused(x: Tensor, fused: nn.Linear, separate: Sequence[nn.Linear]
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v from one E→3E projection, split along the last dim (article 001)."""
    q, k, v = fused(x).chunk(3, dim=-1)
    return q, k, v


def project_separate(x: Tensor, fused: nn.Linear, separate: Sequence[nn.Linear]
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v from three E→E projections."""
    wq, wk, wv = separate
    return wq(x), wk(x), wv(x)


def project_fused_per_output(x: Tensor, fused: nn.Linear, separate: Sequence[nn.Linear]
                             ) -> tuple[Tensor, Tensor, Tensor]:
    """Wrong on purpose (the FLOPs control): the fused E→3E projection run once for each of
    q, k and v, keeping one third each time (three times the work)."""
    return tuple(fused(x).chunk(3, dim=-1)[i] for i in range(3))


def interleaved_times(
    fns: dict[str, Callable[[], Any]],
    *,
    rounds: int,
    repeats: int,
    clock: Callable[[], float] = time.thread_time,
    before: Callable[[], Any] | None = None,
    number: int = 1,
) -> dict[str, float]:
    """Seconds per call of each function: min over ``rounds`` of the median of ``repeats``
    samples, each sample the time of ``number`` consecutive calls divided by ``number``.

    Within a round the functions run interleaved, their order rotated by one each repeat
    (two functions: reversed every other repeat), so that each takes each place in turn and
    a slow spell of the machine hits all of them alike. ``before`` runs untimed before each
    sample (e.g. to clear gradients).
    """
    if rounds < 1 or repeats < 1 or number < 1:
        raise ValueError(f"rounds, repeats and number must be >= 1, got rounds={rounds}, "
                         f"repeats={repeats}, number={number}")
    names = list(fns)
    best = {n: float("inf") for n in names}
    for _ in range(rounds):
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(repeats):
            for n in names[r % len(names):] + names[:r % len(names)]:
                if before is not None:
                    before()
                fn = fns[n]
                t0 = clock()
                for _ in range(number):
                    fn()
                times[n].append((clock() - t0) / number)
        for n in names:
            best[n] = min(best[n], statistics.median(times[n]))
    return best


def _flops(fn: Callable[[], Any]) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        fn()
    return fc.get_total_flops()


def _layer_harness(b: int, n: int, e: int, h: int, ff: int, rounds: int, repeats: int) -> str:
    """Source run after article 001's corrected listing in a fresh interpreter: its
    MultiHeadAttention inside a post-LN encoder layer, timed against torch's layer."""
    return f'''
import statistics as _st, time as _time


class ArticleEncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = MultiHeadAttention({e}, {h})
        self.linear1, self.linear2 = nn.Linear({e}, {ff}), nn.Linear({ff}, {e})
        self.norm1, self.norm2 = nn.LayerNorm({e}), nn.LayerNorm({e})

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


def measure(tensors):
    x = torch.randn({b}, {n}, {e})
    layers = {{"article": ArticleEncoderLayer().eval(),
               "torch": nn.TransformerEncoderLayer({e}, {h}, {ff}, dropout=0.0,
                                                   batch_first=True).eval()}}
    best = {{k: float("inf") for k in layers}}
    with torch.no_grad():
        for layer in layers.values():
            layer(x)
        for _ in range({rounds}):
            times = {{k: [] for k in layers}}
            for r in range({repeats}):
                for k in (list(layers) if r % 2 == 0 else list(layers)[::-1]):
                    t0 = _time.thread_time()
                    layers[k](x)
                    times[k].append(_time.thread_time() - t0)
            for k in layers:
                best[k] = min(best[k], _st.median(times[k]))
    return best
'''


def _time_layers(g: torch.Generator, rounds: int, repeats: int,
                 clock: Callable[[], float]) -> dict[str, float]:
    b, n, e, h, ff = LAYER_SIZE
    theirs = nn.TransformerEncoderLayer(e, h, ff, dropout=0.0, batch_first=True).eval()
    ours = TransformerEncoderLayer.from_torch(theirs).eval()
    x = torch.randn(b, n, e, generator=g)
    with torch.no_grad():
        ours(x), theirs(x)
        return interleaved_times({"attnlab": lambda: ours(x), "torch": lambda: theirs(x)},
                                 rounds=rounds, repeats=repeats, clock=clock)


@dataclass(frozen=True)
class TimedCase:
    """One (size, pass): seconds per call of the fused, separate and twin projections."""

    size: tuple[int, int, int]  # B, N, E
    mode: str  # "forward" or "forward+backward"
    fused: float
    separate: float
    twin: float  # the separate projections again (the control)

    @property
    def ratio(self) -> float:
        """separate / fused (> 1: the fused projection is faster)."""
        return self.separate / self.fused if self.fused > 0 else float("nan")

    @property
    def control(self) -> float:
        """separate / twin (the same implementation timed twice)."""
        return self.separate / self.twin if self.twin > 0 else float("nan")

    def cells(self) -> list[Any]:
        b, n, e = self.size
        return [f"B = {b}, N = {n}, E = {e}", self.mode, 1e3 * self.fused,
                1e3 * self.separate, self.ratio, 1e3 * self.twin, self.control]


@dataclass(frozen=True)
class SizeTiming:
    """One (B, N, E): its two timed cases, and the identities behind them (see
    :func:`_time_size`)."""

    cases: tuple[TimedCase, TimedCase]  # forward, forward+backward
    diff: float  # max |q, k, v (fused) − q, k, v (separate)|
    diff_wrong: float  # the same with the fused rows taken as k, q, v
    gap: int  # |FLOPs(fused) − FLOPs(separate)|
    gap_wrong: int  # the same for :func:`project_fused_per_output`


def _time_size(size: tuple[int, int, int], g: torch.Generator, fused_fn: Callable,
               separate_fn: Callable, twin_fn: Callable, rounds: int, repeats: int,
               clock: Callable[[], float]) -> SizeTiming:
    """Forward and forward+backward cases at one (B, N, E), each timing fused, separate and
    separate's twin (``twin_fn``) interleaved; the largest |q, k, v difference| between the
    variants (and for the fused rows taken in the order k, q, v), and the difference of
    their FLOP counts (and for :func:`project_fused_per_output`)."""
    b, n, e = size
    fused = nn.Linear(e, 3 * e)
    separate = [nn.Linear(e, e) for _ in range(3)]
    with torch.no_grad():  # the fused weight is the three weights stacked
        for i, lin in enumerate(separate):
            lin.weight.copy_(fused.weight[i * e:(i + 1) * e])
            lin.bias.copy_(fused.bias[i * e:(i + 1) * e])
    x = torch.randn(b, n, e, generator=g)
    xg = x.clone().requires_grad_(True)
    params = [fused.weight, fused.bias, xg] + [p for lin in separate for p in lin.parameters()]
    with torch.no_grad():
        qkv_f, qkv_s = fused_fn(x, fused, separate), separate_fn(x, fused, separate)
    diff = max(float((a - c).abs().max()) for a, c in zip(qkv_f, qkv_s))
    wrong_order = (qkv_f[1], qkv_f[0], qkv_f[2])  # the fused rows stacked as k, q, v
    diff_wrong = max(float((a - c).abs().max()) for a, c in zip(wrong_order, qkv_s))
    sep_flops = _flops(lambda: separate_fn(x, fused, separate))
    gap = abs(_flops(lambda: fused_fn(x, fused, separate)) - sep_flops)
    gap_wrong = abs(_flops(lambda: project_fused_per_output(x, fused, separate)) - sep_flops)

    def fw(fn: Callable) -> None:
        with torch.no_grad():
            fn(x, fused, separate)

    def fwbw(fn: Callable) -> None:
        q, k, v = fn(xg, fused, separate)
        (q.sum() + k.sum() + v.sum()).backward()

    def clear() -> None:
        for p in params:
            p.grad = None

    fns = (fused_fn, separate_fn, twin_fn)
    for fn in fns:  # warm up: each forward, then each forward and backward
        fw(fn)
    for fn in fns:
        fwbw(fn)
    out = []
    for mode, step, before in (("forward", fw, None), ("forward+backward", fwbw, clear)):
        t0 = clock()
        step(separate_fn)
        once = clock() - t0
        # short calls are timed in batches of at least SAMPLE seconds (clock resolution,
        # and one interruption no longer dominates a sample)
        number = max(1, min(1000, math.ceil(SAMPLE / once))) if once > 0 else 1
        t = interleaved_times({"fused": functools.partial(step, fused_fn),
                               "separate": functools.partial(step, separate_fn),
                               "twin": functools.partial(step, twin_fn)},
                              rounds=rounds, repeats=repeats, clock=clock, before=before,
                              number=number)
        out.append(TimedCase(size, mode, t["fused"], t["separate"], t["twin"]))
    return SizeTiming((out[0], out[1]), diff, diff_wrong, gap, gap_wrong)


@dataclass(frozen=True)
class FusedQKVMeasurement:
    """Every size timed, the encoder layers (or None), and the machine's load."""

    rounds: int
    repeats: int
    sizes: tuple[SizeTiming, ...]
    layer_times: dict[str, float] | None  # attnlab's and torch's encoder layer (s)
    article_times: dict[str, float] | None  # article 001's corrected layer and torch's (s)
    load_before: float  # load average (1 min)
    load_after: float
    cpus: int | None

    @property
    def cases(self) -> list[TimedCase]:
        return [c for s in self.sizes for c in s.cases]

    @property
    def ratios(self) -> list[float]:
        return [c.ratio for c in self.cases]

    @property
    def geomean(self) -> float:
        """The headline: geometric mean of the ratios separate / fused."""
        return _geomean(self.ratios)

    @property
    def control_mean(self) -> float:
        return _geomean([c.control for c in self.cases])

    @property
    def max_diff(self) -> float:
        return max([0.0] + [s.diff for s in self.sizes])

    @property
    def wrong_diff(self) -> float:
        return max([0.0] + [s.diff_wrong for s in self.sizes])

    @property
    def flops_gap(self) -> int:
        return max([0] + [s.gap for s in self.sizes])

    @property
    def wrong_gap(self) -> int:
        return max([0] + [s.gap_wrong for s in self.sizes])


def measure(
    seed: int = 0,
    *,
    sizes: Sequence[tuple[int, int, int]] = SIZES,
    rounds: int = 3,
    repeats: int = 5,
    clock: Callable[[], float] = time.thread_time,
    fused_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] = project_fused,
    separate_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] = project_separate,
    twin_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] | None = None,
    layers: bool = True,
) -> FusedQKVMeasurement:
    """Time every size, then the encoder layers (arguments: see :func:`run`)."""
    twin = separate_fn if twin_fn is None else twin_fn
    load_before = os.getloadavg()
    with seeded(seed) as g:
        timed = tuple(_time_size(size, g, fused_fn, separate_fn, twin, rounds, repeats, clock)
                      for size in sizes)
        layer_times = _time_layers(g, rounds, repeats, clock) if layers else None
    article_times = _time_article_layer(rounds, repeats, seed) if layers else None
    load_after = os.getloadavg()
    return FusedQKVMeasurement(rounds, repeats, timed, layer_times, article_times,
                               load_before[0], load_after[0], os.cpu_count())


def headline_control(m: FusedQKVMeasurement) -> Control:
    """The same timing of two identical implementations."""
    return Control("the same timing of two identical implementations: separate / "
                   "separate (twin), geometric mean",
                   "同样计时两份相同的实现：分开 / 分开（孪生副本），几何平均", m.control_mean)


def checks(m: FusedQKVMeasurement) -> list[Check]:
    """The two projections compute the same q, k, v with the same FLOPs (identities, each
    beside a wrong variant)."""
    return [
        check_le("fused and separate give the same q, k, v: max |difference|", m.max_diff, 1e-5,
                 id="same-qkv", by_construction=True,
                 control=Control("the fused rows taken in the wrong order (k, q, v)",
                                 "按错误顺序（k、q、v）取融合投影的各行", m.wrong_diff)),
        check_le("|FLOPs(fused) − FLOPs(separate)|", float(m.flops_gap), 0.0, id="same-flops",
                 by_construction=True,
                 control=Control("the fused projection run once for each of q, k, v",
                                 "为 q、k、v 各运行一次融合投影", float(m.wrong_gap))),
    ]


def table(m: FusedQKVMeasurement) -> tuple[list[str], list[list[Any]]]:
    """One row per (size, pass), the encoder layers, and the machine's load."""
    rows: list[list[Any]] = [c.cells() for c in m.cases]
    b, n, e, h, ff = LAYER_SIZE
    size = f"encoder layer: B = {b}, N = {n}, E = {e}, H = {h}, ff = {ff}"
    if m.layer_times is not None:
        ours, theirs = m.layer_times["attnlab"], m.layer_times["torch"]
        rows.append([size, "torch nn.TransformerEncoderLayer | attnlab (this process), "
                     "forward, eval", 1e3 * theirs, 1e3 * ours, ours / theirs, "", ""])
    if m.article_times is not None:
        art, theirs = m.article_times["article"], m.article_times["torch"]
        rows.append([size, "torch nn.TransformerEncoderLayer | article 001's corrected "
                     "MultiHeadAttention in the same layer (fresh interpreter)",
                     1e3 * theirs, 1e3 * art, art / theirs, "", ""])
    rows.append(["load average (1 min) before | after", f"{m.cpus} CPUs",
                 m.load_before, m.load_after, "", "", ""])
    return (["size", "pass", "fused (ms)", "separate (ms)", "ratio separate / fused",
             "separate (twin) (ms)", "ratio separate / separate (twin)"], rows)


def captions(m: FusedQKVMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese."""
    lo, hi, ctl = fmt_num(min(m.ratios)), fmt_num(max(m.ratios)), fmt_num(m.control_mean)
    return (f"One CPU thread, its CPU time; min over {m.rounds} rounds of the median of "
            f"{m.repeats} interleaved calls. Ratios "
            f"{lo}–{hi}; control (the separate "
            f"projections against themselves): geometric mean {ctl}; "
            f"load average {m.load_before:.2f} → {m.load_after:.2f} on "
            f"{m.cpus} CPUs. Encoder-layer rows: second time column / first, "
            "for information only.",
            f"单个 CPU 线程，计其 CPU 时间；取 {m.rounds} 轮中每轮 {m.repeats} 次交替调用的"
            "中位数的最小值。"
            f"时间比 {lo}–{hi}；对照（分开投影与自身"
            f"比较）：几何平均 {ctl}；负载均值 "
            f"{m.load_before:.2f} → {m.load_after:.2f}（{m.cpus} 个 CPU）。"
            "编码器层各行：第二个时间列 / 第一个时间列，仅供参考。")


def run(
    seed: int = 0,
    *,
    plot: bool = True,
    sizes: Sequence[tuple[int, int, int]] = SIZES,
    rounds: int = 3,
    repeats: int = 5,
    clock: Callable[[], float] = time.thread_time,
    fused_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] = project_fused,
    separate_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] = project_separate,
    twin_fn: Callable[..., tuple[Tensor, Tensor, Tensor]] | None = None,
    layers: bool = True,
) -> Result:
    """Time both projections at each size, forward and forward+backward, and, for the
    control, the separate projections a second time (``twin_fn``, default ``separate_fn``
    itself under another name).

    Hooks: ``clock`` (a fake clock makes the verdict deterministic), ``fused_fn`` and
    ``separate_fn`` (a deliberately slow fused variant must not hold), ``twin_fn`` (a twin
    that is not the same, e.g. slower, makes the control pass and the claim not hold),
    ``layers=False`` skips the informative encoder-layer timings.
    """
    m = measure(seed, sizes=sizes, rounds=rounds, repeats=repeats, clock=clock,
                fused_fn=fused_fn, separate_fn=separate_fn, twin_fn=twin_fn, layers=layers)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity="geometric mean over (size, pass) of the time ratio separate / fused "
                 "(> 1: the fused projection is faster)",
        quantity_zh="各（规模，计算）情形下时间比 分开 / 融合 的几何平均（> 1 表示融合投影更快）",
        measured=m.geomean, expected=MARGIN, tolerance=0.0, relation=">=", checks=checks(m),
        timed=True, control=headline_control(m), table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def _geomean(xs: Sequence[float]) -> float:
    """Geometric mean of positive ratios (NaN if any is not positive)."""
    return (math.exp(sum(math.log(x) for x in xs) / len(xs)) if all(x > 0 for x in xs)
            else float("nan"))


def _time_article_layer(rounds: int, repeats: int, seed: int) -> dict[str, float]:
    """Article 001's corrected MultiHeadAttention in an encoder layer vs torch's layer,
    both timed in one fresh interpreter."""
    b, n, e, h, ff = LAYER_SIZE
    src = article_listings.apply_edits(article_listings.listing_source("001"),
                                         article_listings.FIXES_001)
    job: list[article_listings.ListingRun] = [{"label": "001 corrected, timed", "source": src,
            "filename": "001_multi_head_attention.py",
            "harness": _layer_harness(b, n, e, h, ff, rounds, repeats), "measure": "measure"}]
    ((rec,), _), = article_listings.run_listings([(job, {})], seed=seed)
    if rec["error"] is not None:
        raise RuntimeError(f"timing article 001's layer failed: {rec['error']}")
    return rec["value"]


def figure(m: FusedQKVMeasurement):
    """The time ratios per size and pass, beside the control."""
    cases = m.cases
    fig, (ax,) = new_figure(8, 3.6)
    labels = [f"{b}×{n}×{e}" for b, n, e in dict.fromkeys(c.size for c in cases)]
    for mode, marker in (("forward", "o"), ("forward+backward", "s")):
        rs = [c.ratio for c in cases if c.mode == mode]
        ax.plot(range(len(rs)), rs, marker=marker, label=mode)
    cs = [c.control for c in cases]
    ax.plot([i / 2 for i in range(len(cs))], cs, ls="none", marker="x", color="0.5",
            label="control: separate / separate (twin)")
    ax.axhline(1.0, color="k", lw=1, label="equal time")
    ax.axhline(MARGIN, color="k", ls=":", lw=1, label="threshold of the geometric mean")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    label_axes(ax, "size B×N×E", "time ratio separate / fused",
               "Three E→E projections vs one E→3E projection (one CPU thread)")
    return fig
