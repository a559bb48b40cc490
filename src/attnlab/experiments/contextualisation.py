"""contextualisation: the same word's hidden state moves toward the meaning its context gives.

Article 000: 「比如“苹果”这个词，如果周围有“吃”字，它的输出向量就会向“水果”的语义空间偏移；如果
周围有“发布会”字眼，它的输出向量就会向“科技公司”的语义空间偏移」. Measured on a real model,
SmolLM2-135M (``attnlab.models.load("smollm2")``, offline), layer by layer.

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

For each sentence and layer, ``lean = cos(苹果, 水果) − cos(苹果, 科技公司)``. The claim holds
when, at the last layer, the mean lean of the fruit contexts exceeds that of the company
contexts by at least 0.05, every fruit context leans more to 水果 than every company context,
fruit contexts are closer to 水果 than to 科技公司 and company contexts the reverse; layer 0
(the embeddings: the same tokens whatever the context) must show no difference at all. With
attention replaced by each token's own value (:func:`own_value_attention`: no token sees
another) the contexts cannot differ and the claim must fail.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.models import ModelNotAvailableError, load

from ._common import check_ge, check_le, label_axes, new_figure, seeded
from ._result import Result

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
    "causal order: 苹果 in 「苹果公司的发布会」 vs 「苹果」 alone, every layer: max |difference| "
    "/ max |state|":
        "因果顺序：「苹果公司的发布会」中的“苹果”与单独的「苹果」在各层的"
        "最大绝对差 / 状态最大绝对值",
    "mean lean, fruit contexts": "平均倾向，水果语境",
    "mean lean, company contexts": "平均倾向，公司语境",
    "fruit − company": "水果 − 公司",
    "min fruit − max company": "水果最小值 − 公司最大值",
    "fruit contexts (eat, wash, orchard, peel)": "水果语境（吃、洗、果园、削）",
    "company contexts (launch event, tech news, market value)":
        "公司语境（发布会、科技新闻、市值）",
    "layer ({} = embeddings)": "层（{} = 嵌入）",
    "SmolLM2: where the word 'apple' leans, layer by layer": "SmolLM2：“苹果”逐层的语义倾向",
    "cos(apple, fruit) − cos(apple, tech company)": "cos(苹果, 水果) − cos(苹果, 科技公司)",
}

__all__ = ["NAME", "CLAIM", "CLAIM_ZH", "ZH", "WORD", "ANCHORS", "FRUIT", "COMPANY",
           "NEUTRAL", "word_span", "own_value_attention", "run"]

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
#: attnlab's example with 苹果 before its context (article 000 does not say where the
#: context stands, only that it is around the word).
ARTICLE_ORDER = "苹果公司的发布会"
#: Smallest difference of the mean leans (fruit − company) at the last layer.
MIN_SHIFT = 0.05


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

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
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


def _states(model: nn.Module, ids: list[int]) -> Tensor:
    """Hidden states (L + 1, N, E) of one sentence: the embeddings, then every layer."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return torch.stack(out.hidden_states)[:, 0].float()


def run(
    seed: int = 0,
    *,
    plot: bool = True,
    fruit: Sequence[str] = FRUIT,
    company: Sequence[str] = COMPANY,
    anchors: tuple[str, str] = ANCHORS,
    attention_patch: Callable[[nn.Module], contextlib.AbstractContextManager] | None = None,
) -> Result:
    """Lean of 苹果 toward each anchor, per sentence and layer, on SmolLM2.

    Wrong variants: ``attention_patch=own_value_attention`` (no token sees another) or
    swapped ``anchors``. Raises :class:`~attnlab.models.ModelNotAvailableError` when
    SmolLM2 cannot be loaded here.
    """
    try:
        loaded = load("smollm2", progress=False)
    except ModelNotAvailableError as exc:
        raise ModelNotAvailableError(
            f"the contextualisation experiment needs SmolLM2 (attnlab.models.load('smollm2')): "
            f"{exc}") from exc
    model, tok = loaded.model, loaded.tokenizer
    frames = {a: [f.format(a) for f in NEUTRAL] for a in anchors}
    sentences = [*fruit, *company, *frames[anchors[0]], *frames[anchors[1]]]
    patch = contextlib.nullcontext() if attention_patch is None else attention_patch(model)
    with seeded(seed), patch:
        spans = {s: word_span(tok, s, WORD if s in (*fruit, *company) else
                              next(a for a in anchors if s in frames[a])) for s in sentences}
        states = {s: _states(model, spans[s][0]) for s in sentences}
        alone = _states(model, word_span(tok, WORD, WORD)[0])
        article_ids, a0, a1 = word_span(tok, ARTICLE_ORDER, WORD)
        article = _states(model, article_ids)
    # centre: the layer's mean over all tokens but the first of all sentences
    mu = torch.cat([h[:, 1:] for h in states.values()], dim=1).mean(dim=1)  # (L + 1, E)

    def last(s: str) -> Tensor:
        return states[s][:, spans[s][2] - 1] - mu  # (L + 1, E)

    anchor_vec = [torch.stack([last(f) for f in frames[a]]).mean(0) for a in anchors]

    def lean(s: str) -> Tensor:  # (L + 1,)
        v = last(s)
        return (F.cosine_similarity(v, anchor_vec[0], dim=-1)
                - F.cosine_similarity(v, anchor_vec[1], dim=-1))

    lf = torch.stack([lean(s) for s in fruit]).double()  # (S_f, L + 1)
    lc = torch.stack([lean(s) for s in company]).double()
    shift = lf.mean(0) - lc.mean(0)  # (L + 1,)
    separation = lf.min(0).values - lc.max(0).values
    top = shift.shape[0] - 1
    n = a1 - a0
    order_gap = float((article[:, a0:a1] - alone[:, :n]).abs().max()
                      / alone[:, :n].abs().max())
    checks = [
        check_le("layer 0 (embeddings): |mean lean fruit − company|", abs(float(shift[0])), 1e-6,
                 id="embeddings-same"),
        check_ge(f"layer {top}: min lean over fruit contexts − max lean over company contexts",
                 float(separation[top]), 1e-3, id="contexts-separate"),
        check_ge(f"layer {top}: fruit contexts closer to {anchors[0]} than to {anchors[1]}: "
                 "min lean", float(lf[:, top].min()), 1e-3, id="fruit-closer"),
        check_le(f"layer {top}: company contexts closer to {anchors[1]} than to {anchors[0]}: "
                 "max lean", float(lc[:, top].max()), -1e-3, id="company-closer"),
        check_le(f"causal order: {WORD} in 「{ARTICLE_ORDER}」 vs 「{WORD}」 alone, every layer: "
                 "max |difference| / max |state|", order_gap, 1e-5, id="causal-order"),
    ]
    rows = [[layer, float(lf[:, layer].mean()), float(lc[:, layer].mean()),
             float(shift[layer]), float(separation[layer])] for layer in range(top + 1)]
    fig = _figure(lf, lc, anchors) if plot else None
    ids = spans[fruit[0]]
    apart = [layer for layer in range(top + 1)
             if all(float(separation[j]) > 0 for j in range(layer, top + 1))]
    since = (f" Every fruit context leans more to {anchors[0]} than every company context "
             f"from layer {apart[0]} on." if apart else "")
    since_zh = (f"从第 {apart[0]} 层起，每个水果语境都比每个公司语境更偏向“{anchors[0]}”。"
                if apart else "")
    return Result(
        NAME, CLAIM, CLAIM_ZH,
        quantity=f"last layer: mean lean of fruit contexts − mean lean of company contexts, "
                 f"lean = cos({WORD}, {anchors[0]}) − cos({WORD}, {anchors[1]})",
        quantity_zh=f"最后一层：水果语境的平均倾向 − 公司语境的平均倾向，倾向 = "
                    f"cos({WORD}, {anchors[0]}) − cos({WORD}, {anchors[1]})",
        measured=float(shift[top]), expected=MIN_SHIFT, tolerance=0.0, relation=">=",
        checks=checks,
        table=(["layer", "mean lean, fruit contexts", "mean lean, company contexts",
                "fruit − company", "min fruit − max company"], rows),
        figure=fig,
        caption=f"SmolLM2-135M, fp32, {len(fruit)} fruit and {len(company)} company contexts; "
                f"{WORD} is {ids[2] - ids[1]} tokens, its state is its last token's; states "
                f"centred per layer; layer {top} is after the final norm. Anchors: "
                f"{anchors[0]}, {anchors[1]} averaged over {len(NEUTRAL)} neutral frames.{since}",
        caption_zh=f"SmolLM2-135M，fp32，{len(fruit)} 个水果语境和 {len(company)} 个公司语境；"
                   f"“{WORD}”占 {ids[2] - ids[1]} 个词元，取其最后一个词元的状态；"
                   f"各层状态先中心化；第 {top} 层为最终归一化之后。锚点：{anchors[0]}、"
                   f"{anchors[1]}，在 {len(NEUTRAL)} 个中性句式上取平均。{since_zh}",
    )


def _figure(lf: Tensor, lc: Tensor, anchors: tuple[str, str]):
    fig, (ax,) = new_figure(8.5, 3.8)
    layers = list(range(lf.shape[1]))
    # English texts in English only (the Chinese figure gets the characters from ZH)
    for rows, color, label in ((lf, "#2e7d32", "fruit contexts (eat, wash, orchard, peel)"),
                               (lc, "#3451b2",
                                "company contexts (launch event, tech news, market value)")):
        for r in rows:
            ax.plot(layers, r.tolist(), color=color, lw=0.6, alpha=0.4)
        ax.plot(layers, rows.mean(0).tolist(), color=color, lw=2, label=label)
    ax.axhline(0, color="k", lw=0.8)
    names = {"水果": "fruit", "科技公司": "tech company"}
    a, b = (names.get(x, x) for x in anchors)
    label_axes(ax, "layer (0 = embeddings)", f"cos(apple, {a}) − cos(apple, {b})",
               "SmolLM2: where the word 'apple' leans, layer by layer")
    return fig
