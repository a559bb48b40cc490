"""contextualisation: the same word's hidden state moves toward the meaning its context gives.

Article 000: 「比如“苹果”这个词，如果周围有“吃”字，它的输出向量就会向“水果”的语义空间偏移；如果
周围有“发布会”字眼，它的输出向量就会向“科技公司”的语义空间偏移」. Measured on a real model,
SmolLM2-135M (``attnlab.models.load("smollm2")``, offline), layer by layer, and on the same
architecture with random weights (:func:`random_weights`, built from the model's config) as
the control.

* attnlab's example sentences put 苹果 after a fruit context (吃, 洗, 果园, 削) or a company
  context (发布会, 科技新闻, 市值). SmolLM2 is causal: a token sees only what comes before it,
  so the context must precede the word. The article says only that 吃 or 发布会 is around
  (周围) the word; in attnlab's example “苹果公司的发布会” the context follows it, and 苹果's
  states there equal those of “苹果” alone (also measured).
* SmolLM2 reads Chinese as bytes: 苹果 is four tokens (three bytes of 苹, then 果). The word's
  state is the state at its *last* token (found from the tokenizer's character offsets),
  where a causal model has read the whole word.
* Anchors: the states of 水果 and 科技公司 (last token, same layer) averaged over attnlab's
  neutral frames (“水果”, “这是水果”, “我说的是水果” ...).
* Hidden states of such models share a large common direction, and the first token of a
  sequence carries outsized activations; every state is therefore centred by the layer's mean
  state over all tokens but the first of all sentences used, before cosines are taken.

For each sentence and layer, ``lean = cos(苹果, 水果) − cos(苹果, 科技公司)``. The headline is
the mean lean of the fruit contexts minus that of the company contexts at the last layer
(≥ 0.05). The claim checks read each context: at the last layer every fruit context leans
more to 水果 than every company context, fruit contexts are closer to 水果 than to 科技公司
and company contexts the reverse. Each is measured on the random-weights control too, which
must fail it. A few sentences share characters with an anchor (果园 with 水果, 科技新闻 with
科技公司), and a random network, which mixes neighbouring tokens without knowing what they
mean, already moves the *mean* lean that way: the headline's control passes, so the mean
alone is no evidence, while the per-context checks separate the two models.

The same three checks at the middle layer (``mid-…``) test a second reading: that 苹果's
vector already leans there, half-way through the network, not only in the model's output.
Layer 0 (the embeddings: the same tokens whatever the context) must show no difference at
all. With attention replaced by each token's own value (:func:`own_value_attention`: no token
sees another) the contexts cannot differ and every check fails.

The margin at the last layer is thin (a few hundredths), and with four contexts of each kind
it could be luck: a label-permutation test (:func:`permutation_p`) pools the contexts' leans,
splits them at random into as many "fruit" and "company" contexts (:data:`PERMUTATIONS`
relabellings, seeded) and counts how often a random split separates as well as the real one
(``separation-p``, at most :data:`MAX_P`; with 4 + 4 contexts no p can be below 1/70, the
real split being one of 70). ``separating-layers`` gives the run of layers, up to the last,
in which the contexts separate (min fruit − max company ≥ the margin in each): its first
layer. Both are measured on the control too. Wrong variant: ``shuffle_labels=True`` pools
the sentences and splits them at random *before* the measurement (fruit and company mixed in
both groups), and the p-value is then large.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab._errors import check_int
from attnlab.models import ModelNotAvailableError, load

from ._common import check_ge, check_le, label_axes, new_figure, seeded
from ._result import Check, Control, Result, fmt_num
from .separation import MARGIN, PERMUTATIONS, exact_p, permutation_p, separating_from, shuffled

NAME = "contextualisation"
CLAIM = ("The output vector of 苹果 moves toward 水果 when its context is about eating and "
         "toward 科技公司 when its context is a product launch.")
CLAIM_ZH = ("“苹果”一词的输出向量：上下文与“吃”有关时向“水果”偏移，上下文是“发布会”时向"
            "“科技公司”偏移。")

#: English -> Chinese for every string a reader sees (check names, table, figure).
ZH: dict[str, str] = {
    "layer {} (embeddings): |mean lean fruit − company|":
        "第 {} 层（嵌入）：|水果语境与公司语境平均倾向之差|",
    "layer {}: min lean over fruit contexts − max lean over company contexts":
        "第 {} 层：水果语境的最小倾向 − 公司语境的最大倾向",
    "layer {}: fruit contexts closer to 水果 than to 科技公司: min lean":
        "第 {} 层：水果语境离“水果”比离“科技公司”更近：最小倾向",
    "layer {}: company contexts closer to 科技公司 than to 水果: max lean":
        "第 {} 层：公司语境离“科技公司”比离“水果”更近：最大倾向",
    "middle layer {}: min lean over fruit contexts − max lean over company contexts":
        "中间层第 {} 层：水果语境的最小倾向 − 公司语境的最大倾向",
    "middle layer {}: fruit contexts closer to 水果 than to 科技公司: min lean":
        "中间层第 {} 层：水果语境离“水果”比离“科技公司”更近：最小倾向",
    "middle layer {}: company contexts closer to 科技公司 than to 水果: max lean":
        "中间层第 {} 层：公司语境离“科技公司”比离“水果”更近：最大倾向",
    "causal order: 苹果 in “苹果公司的发布会” vs “苹果” alone, every layer: max |difference| "
    "/ max |state|":
        "因果顺序：“苹果公司的发布会”中的“苹果”与单独的“苹果”在各层的"
        "最大绝对差 / 状态最大绝对值",
    "layer {}: label-permutation p-value of min fruit − max company ({} permutations)":
        "第 {} 层：水果最小值 − 公司最大值的标签置换检验 p 值（{} 次置换）",
    "layers {}–{}: the run of layers up to the last where min fruit − max company ≥ {}: "
    "its first layer":
        "第 {}–{} 层：直到最后一层、水果最小值 − 公司最大值均 ≥ {} 的连续层：其第一层",
    "no layer up to the last ({}) where min fruit − max company ≥ {}: its first layer":
        "直到最后一层（第 {} 层）没有水果最小值 − 公司最大值 ≥ {} 的层：其第一层",
    "label-permutation p of min fruit − max company":
        "水果最小值 − 公司最大值的标签置换 p 值",
    "mean lean, fruit contexts": "平均倾向，水果语境",
    "mean lean, company contexts": "平均倾向，公司语境",
    "fruit − company": "水果 − 公司",
    "min fruit − max company": "水果最小值 − 公司最大值",
    "fruit − company, random weights (best draw)": "水果 − 公司，随机权重（最有利的一次抽取）",
    "min fruit − max company, random weights (best draw)":
        "水果最小值 − 公司最大值，随机权重（最有利的一次抽取）",
    "fruit contexts (eat, wash, orchard, peel)": "水果语境（吃、洗、果园、削）",
    "company contexts (launch event, tech news, market value)":
        "公司语境（发布会、科技新闻、市值）",
    "random weights, fruit contexts": "随机权重，水果语境",
    "random weights, company contexts": "随机权重，公司语境",
    "layer ({} = embeddings)": "层（{} = 嵌入）",
    "SmolLM2: where the word 'apple' leans, layer by layer": "SmolLM2：“苹果”逐层的语义倾向",
    "cos(apple, fruit) − cos(apple, tech company)": "cos(苹果, 水果) − cos(苹果, 科技公司)",
}

__all__ = ["NAME", "CLAIM", "CLAIM_ZH", "ZH", "WORD", "ANCHORS", "FRUIT", "COMPANY",
           "NEUTRAL", "CONTEXT_AFTER", "MIN_SHIFT", "DRAWS", "PERMUTATIONS", "MAX_P", "Leans",
           "word_span", "own_value_attention", "random_weights", "leans", "permutation_p",
           "exact_p", "separating_from", "shuffled", "run"]

WORD = "苹果"
#: (fruit anchor, company anchor)
ANCHORS = ("水果", "科技公司")
#: attnlab's examples of 苹果 after a fruit context; the first, “我吃了一个苹果”, puts article
#: 000's 「吃」 before the word.
FRUIT = ("我吃了一个苹果", "她在厨房里洗了一个红苹果", "果园里的树上结满了苹果",
         "他削了一个又甜又脆的苹果")
#: attnlab's examples of 苹果 after a company context; the first carries article 000's
#: 「发布会」.
COMPANY = ("在今天的发布会上，苹果", "手机发布会结束后，苹果", "在科技新闻里，发布会上的苹果",
           "股市收盘后，市值最高的苹果")
#: Neutral frames for the anchors ({} is the anchor word).
NEUTRAL = ("{}", "这是{}", "我说的是{}")
#: attnlab's example with 苹果 before its context, “苹果公司的发布会” (the article does not
#: say where the context stands, only that it is around the word).
CONTEXT_AFTER = "苹果公司的发布会"
#: Smallest difference of the mean leans (fruit − company) at the last layer.
MIN_SHIFT = 0.05
#: The random-weights control, in words.
RANDOM = ("the same architecture with random weights (built from SmolLM2's config, normal "
          "init of std initializer_range)",
          "同一架构、随机权重（由 SmolLM2 的配置构建，标准差为 initializer_range 的正态初始化）")
#: Random networks drawn for the control (seeds seed, seed + 1, ...): a test's control
#: fails only if no draw passes it.
DRAWS = 3
#: Largest permutation p-value of the separation that rules out a lucky labelling.
MAX_P = 0.05
EXPECT_WHY = (
    "Pilot runs (8 random draws): at the last layer every fruit context leans to 水果 and "
    "every company context to 科技公司, which no random-weights draw does; but random "
    "weights already move the mean lean difference to 0.02–0.12 (5 draws of 8 above the "
    "headline's 0.05: sentences share characters with an anchor, 果园 with 水果, 科技新闻 "
    "with 科技公司), so the headline's control passes. At the middle layer 15 the contexts "
    "do not separate: the mean lean difference is about 0.001 and every context, fruit or "
    "company, leans to 水果.")
EXPECT_WHY_ZH = (
    "预实验（8 次随机抽取）：在最后一层，每个水果语境都偏向“水果”，每个公司语境都偏向"
    "“科技公司”，没有一次随机权重的抽取做到这一点；但随机权重已经把平均倾向之差推到 "
    "0.02–0.12（8 次中有 5 次超过标题量的 0.05：有些句子与锚点共享汉字，果园与“水果”、"
    "科技新闻与“科技公司”），所以标题量的对照同样满足。在中间的第 15 层，两类语境并未"
    "分开：平均倾向之差约 0.001，无论水果还是公司语境都偏向“水果”。")


def word_span(tokenizer: Any, sentence: str, word: str) -> tuple[list[int], int, int]:
    """Token ids of ``sentence`` and the token span [start, end) of the last ``word`` in it.

    Uses the tokenizer's character offsets; raises ``ValueError`` when the word is absent
    or a token straddles its boundary (merged with a neighbouring character).
    """
    pos = sentence.rfind(word)
    if pos < 0:
        raise ValueError(f"word {word!r} does not occur in sentence {sentence!r}")
    lo, hi = pos, pos + len(word)
    enc = tokenizer(sentence, return_offsets_mapping=True, add_special_tokens=False)
    inside = [i for i, (s, e) in enumerate(enc["offset_mapping"]) if s < hi and e > lo]
    if not inside:
        raise ValueError(f"no token of {sentence!r} covers {word!r}")
    first, last = enc["offset_mapping"][inside[0]], enc["offset_mapping"][inside[-1]]
    if first[0] < lo or last[1] > hi:
        raise ValueError(f"the tokenizer merged {word!r} with a neighbouring character in "
                         f"{sentence!r} (token offsets {first} … {last}); choose another "
                         "sentence")
    return list(enc["input_ids"]), inside[0], inside[-1] + 1


@contextlib.contextmanager
def own_value_attention(model: nn.Module) -> Iterator[None]:
    """Wrong on purpose: every attention layer outputs ``o_proj`` of each token's own value
    (as if each token attended only to itself), so no token sees any other.

    For Llama-style attention modules (``v_proj``, ``o_proj``, ``num_key_value_groups``).
    """
    handles = []

    def hook(module: Any, args: tuple, kwargs: dict, output: Any) -> Any:
        h = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        b, n, _ = h.shape
        v = module.v_proj(h).view(b, n, -1, module.head_dim)  # (B, N, H_kv, d)
        v = v.repeat_interleave(module.num_key_value_groups, dim=2).reshape(b, n, -1)
        return (module.o_proj(v), *output[1:])

    for m in model.modules():
        if all(hasattr(m, a) for a in ("v_proj", "o_proj", "num_key_value_groups")):
            handles.append(m.register_forward_hook(hook, with_kwargs=True))
    if not handles:
        raise ValueError("model has no Llama-style attention module (v_proj, o_proj, "
                         "num_key_value_groups) to replace")
    try:
        yield
    finally:
        for hd in handles:
            hd.remove()


def random_weights(model: nn.Module, seed: int, *, into: nn.Module | None = None) -> nn.Module:
    """The control: ``model``'s network (its base model, without the output head) built from
    its config with random weights, in eval mode; nothing is downloaded, nothing of the
    trained weights is used (only the buffers, the rotary frequencies, are copied).

    Matrices and embeddings are drawn from N(0, ``config.initializer_range``²) (the
    architecture's own init), norm weights are 1 and biases 0, from a generator seeded with
    ``seed``. ``into``: a network this function built before, whose weights are drawn again
    in place (the same result as a new one, without allocating it).
    """
    base = getattr(model, "model", model)
    config = getattr(base, "config", None)
    if config is None or not hasattr(config, "initializer_range"):
        raise ValueError(f"model must be a Hugging Face model whose config has "
                         f"initializer_range, got {type(model).__name__}")
    if into is None:
        with torch.device("meta"):
            into = type(base)(config)
        into.to_empty(device="cpu")
    elif type(into) is not type(base):
        raise TypeError(f"into must be a {type(base).__name__} built by random_weights, got "
                        f"{type(into).__name__}")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in into.named_parameters():
            if p.dim() > 1:
                p.normal_(0.0, float(config.initializer_range), generator=g)
            else:
                p.fill_(0.0 if name.endswith("bias") else 1.0)
        buffers = dict(base.named_buffers())
        for name, b in into.named_buffers():
            b.copy_(buffers[name])
    return into.eval()


def _states(model: nn.Module, sentences: Sequence[list[int]]) -> list[Tensor]:
    """Hidden states (L + 1, N_i, E) of each sentence (its token ids): the embeddings, then
    every layer (of the base model: the output head, which the states do not need, is not
    run).

    One forward pass of them all, each padded on the right to the longest and the padding
    masked: the model is causal, so a token's states depend on the tokens before it only,
    and the padding after a sentence changes none of its own. One pass reads the weights
    once for all the sentences (14 passes of SmolLM2 become one); the numbers are those of
    a pass per sentence to float32's rounding (the matrix products add in another order).
    """
    n = max(len(ids) for ids in sentences)
    pad = sentences[0][0]  # any token: masked, and after every token that is read
    ids = torch.tensor([[*s, *[pad] * (n - len(s))] for s in sentences])
    mask = torch.tensor([[1] * len(s) + [0] * (n - len(s)) for s in sentences])
    with torch.no_grad():
        out = getattr(model, "model", model)(input_ids=ids, attention_mask=mask,
                                             output_hidden_states=True)
    states = torch.stack(out.hidden_states).float()  # (L + 1, S, n, E)
    return [states[:, i, :len(s)] for i, s in enumerate(sentences)]


@dataclass(frozen=True)
class Leans:
    """The lean of 苹果, ``cos(苹果, anchor 0) − cos(苹果, anchor 1)``, per context and layer
    (layer 0 = embeddings), on one model.

    ``fruit`` (S_f, L + 1) and ``company`` (S_c, L + 1); ``order_gap``: max |state of 苹果
    in :data:`CONTEXT_AFTER` − state of 苹果 alone| / max |state|, over every layer (NaN
    when not measured).
    """

    fruit: Tensor
    company: Tensor
    order_gap: float

    @property
    def shift(self) -> Tensor:
        """Mean lean of the fruit contexts − that of the company contexts, per layer."""
        return self.fruit.mean(0) - self.company.mean(0)

    @property
    def separation(self) -> Tensor:
        """Min lean over the fruit contexts − max lean over the company contexts, per layer."""
        return self.fruit.min(0).values - self.company.max(0).values


def leans(model: nn.Module, tokenizer: Any, fruit: Sequence[str] = FRUIT,
          company: Sequence[str] = COMPANY, anchors: tuple[str, str] = ANCHORS, *,
          order: bool = True) -> Leans:
    """The :class:`Leans` of 苹果 in ``fruit`` and ``company`` contexts on ``model``
    (``order=False``: without the causal-order gap, two sentences fewer in the pass)."""
    frames = {a: [f.format(a) for f in NEUTRAL] for a in anchors}
    sentences = [*fruit, *company, *frames[anchors[0]], *frames[anchors[1]]]
    spans = {s: word_span(tokenizer, s, WORD if s in (*fruit, *company) else
                          next(a for a in anchors if s in frames[a])) for s in sentences}
    ids = [spans[s][0] for s in sentences]
    if order:  # 苹果 alone and before its context, in the same pass
        alone_ids = word_span(tokenizer, WORD, WORD)[0]
        after_ids, a0, a1 = word_span(tokenizer, CONTEXT_AFTER, WORD)
        ids += [alone_ids, after_ids]
    passed = _states(model, ids)
    states = dict(zip(sentences, passed))
    # centre: the layer's mean over all tokens but the first of all sentences
    mu = torch.cat([h[:, 1:] for h in states.values()], dim=1).mean(dim=1)  # (L + 1, E)

    def last(s: str) -> Tensor:
        return states[s][:, spans[s][2] - 1] - mu  # (L + 1, E)

    anchor_vec = [torch.stack([last(f) for f in frames[a]]).mean(0) for a in anchors]

    def lean(s: str) -> Tensor:  # (L + 1,)
        v = last(s)
        return (F.cosine_similarity(v, anchor_vec[0], dim=-1)
                - F.cosine_similarity(v, anchor_vec[1], dim=-1))

    gap = float("nan")
    if order:
        alone, after = passed[-2:]
        n = a1 - a0
        gap = float((after[:, a0:a1] - alone[:, :n]).abs().max() / alone[:, :n].abs().max())
    return Leans(torch.stack([lean(s) for s in fruit]).double(),
                 torch.stack([lean(s) for s in company]).double(), gap)


@dataclass(frozen=True)
class BestDraw:
    """The control's values, per layer, most favourable to each test over the random draws
    (a control fails only if no draw passes): the largest mean shift, separation and
    minimum fruit lean, the smallest maximum company lean; ``mean_*``: the draws' means."""

    shift: Tensor
    separation: Tensor
    fruit_min: Tensor
    company_max: Tensor
    mean_fruit: Tensor
    mean_company: Tensor

    @classmethod
    def of(cls, draws: Sequence[Leans]) -> BestDraw:
        def most(xs: list[Tensor]) -> Tensor:
            return torch.stack(xs).max(0).values

        return cls(most([d.shift for d in draws]), most([d.separation for d in draws]),
                   most([d.fruit.min(0).values for d in draws]),
                   -most([-d.company.max(0).values for d in draws]),
                   torch.stack([d.fruit.mean(0) for d in draws]).mean(0),
                   torch.stack([d.company.mean(0) for d in draws]).mean(0))


def _context_checks(lv: Leans, best: BestDraw, layer: int, anchors: tuple[str, str], where: str,
                    prefix: str, what: tuple[str, str]) -> list:
    """The three per-context checks at ``layer``, each with the control's value."""
    def control(x: Tensor) -> Control:
        return Control(*what, float(x[layer]))

    return [
        check_ge(f"{where} {layer}: min lean over fruit contexts − max lean over company "
                 "contexts", float(lv.separation[layer]), MARGIN, id=f"{prefix}contexts-separate",
                 control=control(best.separation)),
        check_ge(f"{where} {layer}: fruit contexts closer to {anchors[0]} than to {anchors[1]}: "
                 "min lean", float(lv.fruit[:, layer].min()), MARGIN, id=f"{prefix}fruit-closer",
                 control=control(best.fruit_min)),
        check_le(f"{where} {layer}: company contexts closer to {anchors[1]} than to "
                 f"{anchors[0]}: max lean", float(lv.company[:, layer].max()), -MARGIN,
                 id=f"{prefix}company-closer", control=control(best.company_max)),
    ]


def _control_leans(model: nn.Module, tok: Any, seed: int, draws: int,
                   control_model: Callable[[nn.Module, int], nn.Module],
                   attention_patch: Callable[[nn.Module], contextlib.AbstractContextManager]
                   | None, texts: tuple) -> list[Leans]:
    """The leans on ``draws`` control networks, ``control_model(model, seed + d)`` (the
    default :func:`random_weights` draws each into the same network)."""
    out: list[Leans] = []
    net = None
    for d in range(draws):
        net = (random_weights(model, seed + d, into=net) if control_model is random_weights
               else control_model(model, seed + d))
        patch = contextlib.nullcontext() if attention_patch is None else attention_patch(net)
        with patch:
            out.append(leans(net, tok, *texts, order=False))
    return out


@dataclass(frozen=True)
class LayerRow:
    """One layer of the table: the model's leans and the control's best draw."""

    layer: int
    mean_fruit: float
    mean_company: float
    shift: float  # mean fruit − mean company
    separation: float  # min fruit − max company
    control_shift: float
    control_separation: float
    p: float  # label-permutation p-value of the separation

    def cells(self) -> list:
        return [self.layer, self.mean_fruit, self.mean_company, self.shift, self.separation,
                self.control_shift, self.control_separation, self.p]


@dataclass(frozen=True)
class ContextualisationMeasurement:
    """The leans of 苹果 on SmolLM2 and on the random-weights control (the draw most
    favourable to each test), with the separation's permutation p-values."""

    fruit: tuple[str, ...]
    company: tuple[str, ...]
    anchors: tuple[str, str]
    seed: int
    draws: int
    permutations: int
    model: Leans
    control: BestDraw
    p: Tensor  # (L + 1,) permutation p of the separation, per layer
    control_p: Tensor  # (L + 1,) the smallest over the control's draws
    first: int  # first layer of the separating run up to the last (L + 1: none)
    control_first: int
    exact_p: float | None  # exact p at the last layer (None: too many splits)
    word_tokens: int  # tokens of 苹果 in the first fruit context

    @property
    def top(self) -> int:
        return self.model.shift.shape[0] - 1

    @property
    def mid(self) -> int:
        return self.top // 2

    @property
    def splits(self) -> int:
        return math.comb(len(self.fruit) + len(self.company), len(self.fruit))

    @property
    def layers(self) -> list[LayerRow]:
        lv, best = self.model, self.control
        return [LayerRow(layer, float(lv.fruit[:, layer].mean()),
                         float(lv.company[:, layer].mean()), float(lv.shift[layer]),
                         float(lv.separation[layer]), float(best.shift[layer]),
                         float(best.separation[layer]), float(self.p[layer]))
                for layer in range(self.top + 1)]


def measure(
    seed: int = 0,
    *,
    fruit: Sequence[str] = FRUIT,
    company: Sequence[str] = COMPANY,
    anchors: tuple[str, str] = ANCHORS,
    attention_patch: Callable[[nn.Module], contextlib.AbstractContextManager] | None = None,
    control_model: Callable[[nn.Module, int], nn.Module] = random_weights,
    draws: int = DRAWS,
    permutations: int = PERMUTATIONS,
    shuffle_labels: bool = False,
) -> ContextualisationMeasurement:
    """The leans of 苹果 on SmolLM2 and on ``draws`` control networks, and the
    permutation p-values of the separation (arguments: see :func:`run`)."""
    check_int("draws", draws, minimum=1)  # random networks for the control
    check_int("permutations", permutations, minimum=1)  # random relabellings
    if shuffle_labels:
        fruit, company = shuffled(fruit, company, seed)
    try:
        loaded = load("smollm2", progress=False)
    except ModelNotAvailableError as exc:
        raise ModelNotAvailableError(
            f"the contextualisation experiment needs SmolLM2 (attnlab.models.load('smollm2')): "
            f"{exc}") from exc
    model, tok = loaded.model, loaded.tokenizer
    texts = (fruit, company, anchors)
    patch = contextlib.nullcontext() if attention_patch is None else attention_patch(model)
    with seeded(seed):
        with patch:
            lv = leans(model, tok, *texts)
        control_leans = _control_leans(model, tok, seed, draws, control_model, attention_patch,
                                       texts)
    p = permutation_p(lv.fruit, lv.company, permutations, seed)
    best_p = torch.stack([permutation_p(d.fruit, d.company, permutations, seed)
                          for d in control_leans]).min(0).values
    top = lv.shift.shape[0] - 1
    splits = math.comb(len(fruit) + len(company), len(fruit))
    exact = float(exact_p(lv.fruit, lv.company)[top]) if splits <= 10**5 else None
    ids = word_span(tok, fruit[0], WORD)
    return ContextualisationMeasurement(
        tuple(fruit), tuple(company), anchors, seed, draws, permutations, lv,
        BestDraw.of(control_leans), p, best_p, separating_from(lv.separation),
        min(separating_from(d.separation) for d in control_leans), exact, ids[2] - ids[1])


def _control_what(m: ContextualisationMeasurement) -> tuple[str, str]:
    """The random-weights control, in words (English, Chinese)."""
    return (f"{RANDOM[0]}, the most favourable of {m.draws} draw{'s' if m.draws > 1 else ''}",
            f"{RANDOM[1]}，{m.draws} 次抽取中最有利的一次")


def headline_control(m: ContextualisationMeasurement) -> Control:
    """The best draw's mean lean difference at the last layer."""
    return Control(*_control_what(m), float(m.control.shift[m.top]))


def checks(m: ContextualisationMeasurement) -> list[Check]:
    """Embeddings alike, the contexts separate (last and middle layer), causal order, the
    permutation p-value and the separating layers, each with its control."""
    lv, top, first, what = m.model, m.top, m.first, _control_what(m)
    return [
        check_le("layer 0 (embeddings): |mean lean fruit − company|", abs(float(lv.shift[0])),
                 1e-6, id="embeddings-same", support=True,
                 control=Control("the same measure after the first layer (layer 1)",
                                 "第一层之后（第 1 层）的同一度量", abs(float(lv.shift[1])))),
        *_context_checks(lv, m.control, top, m.anchors, "layer", "", what),
        *_context_checks(lv, m.control, m.mid, m.anchors, "middle layer", "mid-", what),
        check_le(f"causal order: {WORD} in “{CONTEXT_AFTER}” vs “{WORD}” alone, every layer: "
                 "max |difference| / max |state|", lv.order_gap, 1e-5, id="causal-order",
                 support=True),
        check_le(f"layer {top}: label-permutation p-value of min fruit − max company "
                 f"({m.permutations} permutations)", float(m.p[top]), MAX_P, id="separation-p",
                 control=Control(*what, float(m.control_p[top]))),
        check_le(f"layers {first}–{top}: the run of layers up to the last where min fruit − "
                 f"max company ≥ {fmt_num(MARGIN)}: its first layer" if first <= top else
                 f"no layer up to the last ({top}) where min fruit − max company ≥ "
                 f"{fmt_num(MARGIN)}: its first layer", first, top, id="separating-layers",
                 control=Control(*what, m.control_first)),
    ]


def table(m: ContextualisationMeasurement) -> tuple[list[str], list[list]]:
    return (["layer", "mean lean, fruit contexts", "mean lean, company contexts",
             "fruit − company", "min fruit − max company",
             "fruit − company, random weights (best draw)",
             "min fruit − max company, random weights (best draw)",
             "label-permutation p of min fruit − max company"],
            [row.cells() for row in m.layers])


def captions(m: ContextualisationMeasurement) -> tuple[str, str]:
    """The caption in English and in Chinese: the setting, the separating layers, the
    permutations, the control, the middle layer."""
    anchors, top, mid, first, splits = m.anchors, m.top, m.mid, m.first, m.splits
    n_f, n_c, permutations, seed, draws = (len(m.fruit), len(m.company), m.permutations,
                                           m.seed, m.draws)
    exact = fmt_num(m.exact_p) if m.exact_p is not None else None
    p_top = fmt_num(float(m.p[top]))
    shift, separation = m.model.shift, m.model.separation
    since = (f" Every fruit context leans more to {anchors[0]} than every company context "
             f"(by ≥ {fmt_num(MARGIN)}) from layer {first} on." if first <= top else "")
    since_zh = (f"从第 {first} 层起，每个水果语境都比每个公司语境更偏向“{anchors[0]}”"
                f"（至少 {fmt_num(MARGIN)}）。" if first <= top else "")
    perm = (f" Label permutations: {permutations} random splits of the {n_f} + {n_c} "
            f"contexts (seed {seed}); at layer {top} the real split's separation gives "
            f"p = {p_top}"
            + (f" (exact, over all {splits} splits: {exact}; it cannot be below 1/{splits}, "
               "the real split being one of them)." if exact else "."))
    perm_zh = (f"标签置换：把 {n_f} + {n_c} 个语境随机重新划分 {permutations} 次"
               f"（种子 {seed}）；在第 {top} 层，真实划分的分离度对应 p = {p_top}"
               + (f"（对全部 {splits} 种划分精确计算：{exact}；真实划分是其中之一，"
                  f"p 不可能低于 1/{splits}）。" if exact else "。"))
    c_shift, c_sep = fmt_num(float(m.control.shift[top])), fmt_num(float(m.control.separation[top]))
    s_top, sep_top = fmt_num(float(shift[top])), fmt_num(float(separation[top]))
    s_mid, sep_mid = fmt_num(float(shift[mid])), fmt_num(float(separation[mid]))
    en = (f"SmolLM2-135M, fp32, {n_f} fruit and {n_c} company contexts; {WORD} is "
          f"{m.word_tokens} tokens, its state is its last token's; states centred per layer; "
          f"layer {top} is after the final norm. Anchors: {anchors[0]}, {anchors[1]} averaged "
          f"over {len(NEUTRAL)} neutral frames.{since}{perm} Control: the same network with "
          f"random weights, {draws} draws; at layer {top} the most favourable draw reaches a "
          f"mean lean difference of {c_shift} (the model: {s_top}) but a min fruit − max "
          f"company of only {c_sep} (the model: {sep_top}). Middle layer {mid}: the model's "
          f"mean lean difference is {s_mid}, its min fruit − max company {sep_mid}.")
    zh = (f"SmolLM2-135M，fp32，{n_f} 个水果语境和 {n_c} 个公司语境；“{WORD}”占 "
          f"{m.word_tokens} 个词元，取其最后一个词元的状态；各层状态先中心化；第 {top} 层为最终"
          f"归一化之后。锚点：{anchors[0]}、{anchors[1]}，在 {len(NEUTRAL)} 个中性句式上取平均。"
          f"{since_zh}{perm_zh}对照：同一网络、随机权重，抽取 {draws} 次；在第 {top} 层，最有利"
          f"的一次平均倾向之差达到 {c_shift}（模型：{s_top}），但水果最小值 − 公司最大值只有 "
          f"{c_sep}（模型：{sep_top}）。中间的第 {mid} 层：模型的平均倾向之差为 {s_mid}，"
          f"水果最小值 − 公司最大值为 {sep_mid}。")
    return en, zh


def run(
    seed: int = 0,
    *,
    plot: bool = True,
    fruit: Sequence[str] = FRUIT,
    company: Sequence[str] = COMPANY,
    anchors: tuple[str, str] = ANCHORS,
    attention_patch: Callable[[nn.Module], contextlib.AbstractContextManager] | None = None,
    control_model: Callable[[nn.Module, int], nn.Module] = random_weights,
    draws: int = DRAWS,
    permutations: int = PERMUTATIONS,
    shuffle_labels: bool = False,
) -> Result:
    """Lean of 苹果 toward each anchor, per sentence and layer, on SmolLM2 and on the
    control: ``draws`` networks ``control_model(model, seed + d)`` (:func:`random_weights`),
    each test's control value being the draw most favourable to it.

    ``permutations``: random relabellings for the separation's p-value (:func:`permutation_p`,
    seeded with ``seed``).

    Wrong variants: ``attention_patch=own_value_attention`` (no token sees another, on every
    network), swapped ``anchors``, a ``control_model`` that returns the trained model, or
    ``shuffle_labels=True`` (the sentences split at random into the two groups before the
    measurement, :func:`shuffled`).
    Raises :class:`~attnlab.models.ModelNotAvailableError` when SmolLM2 cannot be loaded
    here.
    """
    m = measure(seed, fruit=fruit, company=company, anchors=anchors,
                attention_patch=attention_patch, control_model=control_model, draws=draws,
                permutations=permutations, shuffle_labels=shuffle_labels)
    caption, caption_zh = captions(m)
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"last layer: mean lean of fruit contexts − mean lean of company contexts, "
                 f"lean = cos({WORD}, {anchors[0]}) − cos({WORD}, {anchors[1]})",
        quantity_zh=f"最后一层：水果语境的平均倾向 − 公司语境的平均倾向，倾向 = "
                    f"cos({WORD}, {anchors[0]}) − cos({WORD}, {anchors[1]})",
        measured=float(m.model.shift[m.top]), expected=MIN_SHIFT, tolerance=0.0,
        relation=">=", checks=checks(m), control=headline_control(m), expect_holds=False,
        expect_why=EXPECT_WHY, expect_why_zh=EXPECT_WHY_ZH, table=table(m),
        figure=figure(m) if plot else None, caption=caption, caption_zh=caption_zh)


def figure(m: ContextualisationMeasurement):
    """The lean per layer of every context, the model and the control's mean."""
    lv, best, anchors = m.model, m.control, m.anchors
    fig, (ax,) = new_figure(8.5, 3.8)
    layers = list(range(lv.fruit.shape[1]))
    # English texts in English only (the Chinese figure gets the characters from ZH)
    for rows, color, label in ((lv.fruit, "#2e7d32", "fruit contexts (eat, wash, orchard, peel)"),
                               (lv.company, "#3451b2",
                                "company contexts (launch event, tech news, market value)")):
        for r in rows:
            ax.plot(layers, r.tolist(), color=color, lw=0.6, alpha=0.4)
        ax.plot(layers, rows.mean(0).tolist(), color=color, lw=2, label=label)
    for mean, color, label in ((best.mean_fruit, "#2e7d32", "random weights, fruit contexts"),
                               (best.mean_company, "#3451b2",
                                "random weights, company contexts")):
        ax.plot(layers, mean.tolist(), color=color, lw=1.2, ls="--", label=label)
    ax.axhline(0, color="k", lw=0.8)
    names = {"水果": "fruit", "科技公司": "tech company"}
    a, b = (names.get(x, x) for x in anchors)
    label_axes(ax, "layer (0 = embeddings)", f"cos(apple, {a}) − cos(apple, {b})",
               "SmolLM2: where the word 'apple' leans, layer by layer")
    return fig
