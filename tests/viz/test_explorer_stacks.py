"""The explorer for inputs beyond one self-attention stack: an encoder–decoder trace (encoder,
decoder and cross-attention, each its own trace, chosen with a stack selector; cross-attention
with the target tokens as rows and the source tokens as columns) and an image trace (the
image, its patch grid and its prefix tokens). Python side; the page is driven in Chromium by
test_explorer_stacks_browser.py."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
import torch

from attnlab.core.scores import ScoreShape, row_logsumexp
from attnlab.tracing import StackedTrace, load_trace
from attnlab.tracing.attention import AttentionTrace
from attnlab.viz.explorer import (
    POSITION_SCORES,
    Explorer,
    ExplorerConfig,
    decode_blob,
    image_input,
    input_stacks,
    is_cross,
    qk_row_probs,
)

SOURCE = ["▁The", "▁cat", "▁sat", "▁on", "▁the", "▁mat", ".", "</s>", "<pad>"][:8]
TARGET = ["<s>", "▁Die", "▁Katze", "▁saß", "</s>"]


def qk_trace(tokens: list[str], keys: list[str] | None, *, stack: str, causal: bool,
             layers: int = 2, heads: int = 3, d: int = 8, seed: int = 0,
             meta: dict | None = None) -> AttentionTrace:
    """A q/k/lse trace with exact log-sum-exp; q and k scaled up so heads are sharp."""
    g = torch.Generator().manual_seed(seed)
    lk = len(keys if keys is not None else tokens)
    q = torch.randn(layers, heads, len(tokens), d, generator=g) * 1.8
    k = torch.randn(layers, heads, lk, d, generator=g) * 1.8
    shape = ScoreShape(scale=d ** -0.5, causal=causal)
    lse = torch.stack([row_logsumexp(q[i], k[i], shape) for i in range(layers)])
    return AttentionTrace(tokens=tokens, key_tokens=keys, q=q, k=k, lse=lse, shapes=shape,
                          model="toy-seq2seq", stack=stack, meta=meta)


def stacked_trace(source: list[str] = SOURCE, target: list[str] = TARGET) -> StackedTrace:
    """Encoder (bidirectional, 2 layers × 3 heads), decoder (causal, 3 × 2) and cross
    (target rows, source columns, 3 × 2): stacks of different sizes, as BART or T5 have."""
    enc = qk_trace(source, None, stack="encoder", causal=False, seed=1)
    dec = qk_trace(target, None, stack="decoder", causal=True, layers=3, heads=2, seed=2)
    cross = qk_trace(target, source, stack="cross", causal=False, layers=3, heads=2, seed=3)
    return StackedTrace({"encoder": enc, "decoder": dec, "cross": cross}, model="toy-seq2seq",
                        text=" ".join(source), target=" ".join(target))


def stripes_png(h: int, w: int) -> str:
    """A base64 PNG with structure: diagonal stripes, a bright disc, a dark square."""
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3), dtype=np.uint8)
    img[..., 0] = 120 + 100 * (((xx + yy) // 4) % 2)
    img[..., 1] = 60 + 3 * xx
    img[..., 2] = 200 * (((xx - w * 0.65) ** 2 + (yy - h * 0.4) ** 2) < (h / 4) ** 2)
    img[h // 2:h // 2 + h // 4, 2:2 + w // 5] = 20
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def image_trace(rows: int = 4, cols: int = 5, prefix: int = 1, patch: int = 8,
                seed: int = 4) -> AttentionTrace:
    """A vision-transformer-like trace: prefix tokens, then rows × cols patches r{r}c{c}."""
    names = ["[CLS]", "[DIST]", "[REG0]"][:prefix]
    tokens = names + [f"r{r}c{c}" for r in range(rows) for c in range(cols)]
    meta = {"input": {"kind": "image", "grid": [rows, cols], "prefix": prefix,
                      "patch_size": patch, "image_size": [rows * patch, cols * patch],
                      "image_png": stripes_png(rows * patch, cols * patch),
                      "path": "stripes.png"}}
    return qk_trace(tokens, None, stack="self", causal=False, seed=seed, meta=meta)


def page_data(ex: Explorer) -> dict:
    m = re.search(rf'id="{ex.uid}-data">(.*?)</script>', ex.to_html(), re.S)
    assert m is not None
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def stacked() -> StackedTrace:
    return stacked_trace()


def test_stacked_trace_is_one_input_with_its_stacks_in_order(stacked):
    ex = Explorer(stacked, uid="ax-s2s")
    data = page_data(ex)
    assert len(data["inputs"]) == 1
    inp = data["inputs"][0]
    assert [s["name"] for s in inp["stacks"]] == ["encoder", "decoder", "cross"]
    assert inp["text"] == " ".join(SOURCE) and inp["target"] == " ".join(TARGET)
    for s in inp["stacks"]:
        tr, t = data["traces"][s["t"]], stacked[s["name"]]
        assert tr["stack"] == s["name"]
        assert (tr["L"], tr["H"], tr["Lq"], tr["Lk"]) == (t.num_layers, t.num_heads,
                                                            t.seq_len, t.key_len)
        assert tr["cross"] == (s["name"] == "cross")
    cross = data["traces"][2]
    assert cross["tokens"] == TARGET and cross["key_tokens"] == SOURCE  # rows, columns
    assert data["traces"][0]["tokens"] == SOURCE and data["traces"][1]["tokens"] == TARGET


def test_cross_maps_are_target_rows_over_source_columns(stacked):
    data = page_data(Explorer(stacked, uid="ax-s2s"))
    t = stacked["cross"]
    w = decode_blob(data["traces"][2]["weights"])
    assert tuple(w.shape) == (3, 2, len(TARGET), len(SOURCE))
    exact = torch.stack([torch.stack([t.head_weights(l_, h) for h in range(2)])
                         for l_ in range(3)]).double()
    assert (w - exact).abs().max() <= data["traces"][2]["weights_error"] + 1e-9
    # the transpose (source rows over target columns) is not what the page holds
    assert tuple(w.shape[-2:]) != (len(SOURCE), len(TARGET))


def test_cross_qk_and_geometry_use_the_cross_stacks_q_and_k(stacked):
    data = page_data(Explorer(stacked, uid="ax-s2s"))
    t, qk = stacked["cross"], data["traces"][2]["qk"]
    q, k = decode_blob(qk["q"]), decode_blob(qk["k"])
    for n, (l_, h) in enumerate(qk["heads"]):
        assert torch.equal(q[n].float(), t.q[l_, h])  # float32: exactly the trace's
        kk = k[qk["k_of"][n]].float()
        assert torch.equal(kk, t.k[l_, t.kv_head(h)])
        p = qk_row_probs(q[n], kk, t.score_shape(l_), rows=range(t.seq_len), lq=t.seq_len,
                         lk=t.key_len, head=h)
        assert (p - t.weights_rows(l_, h, range(t.seq_len)).double()).abs().max() < 1e-5
        dec = stacked["decoder"]  # the decoder's own q/k give another attention entirely
        if l_ < dec.num_layers:
            assert q[n].shape != dec.k[l_, 0].shape or not torch.equal(q[n].float(),
                                                                       dec.q[l_, h])
    geo = decode_blob(qk["geometry"])
    assert tuple(geo.shape) == (len(qk["heads"]), t.seq_len + t.key_len, 2)


def test_cross_diagnostics_leave_out_position_scores_and_others_keep_them(stacked):
    data = page_data(Explorer(stacked, uid="ax-s2s"))
    enc, dec, cross = (data["traces"][i]["diagnostics"]["columns"] for i in range(3))
    for name in ("sink", "previous", "diagonal", "distance"):
        assert name in enc and name in dec and name not in cross
    assert not set(cross) & set(POSITION_SCORES)
    assert {"entropy", "max_weight", "redundancy", "roles"} <= set(cross)
    roles = [r["roles"] for r in data["traces"][2]["diagnostics"]["rows"]]
    assert not any(x in r for r in roles for x in ("sink", "previous-token", "self",
                                                    "induction"))


def test_is_cross_tells_cross_attention_from_a_decoder_with_cached_keys():
    w = torch.softmax(torch.randn(1, 1, 2, 4), -1)
    assert is_cross(AttentionTrace(tokens=["x", "y"], key_tokens=list("abcd"), weights=w))
    cached = AttentionTrace(tokens=["c", "d"], key_tokens=list("abcd"), weights=w)
    assert not is_cross(cached)  # the queries are the last keys: positions align
    same = AttentionTrace(tokens=list("ab"), weights=w[..., :2], stack="cross")
    assert is_cross(same)  # the stack says so even when the labels coincide


def test_several_inputs_and_stacks_on_one_page(stacked):
    one = image_trace()
    ex = Explorer([one, stacked], uid="ax-mix")
    data = page_data(ex)
    assert [[s["name"] for s in i["stacks"]] for i in data["inputs"]] == \
        [["self"], ["encoder", "decoder", "cross"]]
    assert [s["t"] for i in data["inputs"] for s in i["stacks"]] == [0, 1, 2, 3]
    assert len(ex.traces) == 4 and ex.traces[3] is stacked["cross"]
    assert data["inputs"][0]["media"]["kind"] == "image"
    assert "image_png" not in data["inputs"][0]["media"]  # the picture travels once
    with pytest.raises(ValueError, match=r"one per stack of a several-stack input \(4\)"):
        Explorer([one, stacked], api=["/a", "/b"])
    with pytest.raises(TypeError, match=r"StackedTrace or a non-empty list of them, got"):
        Explorer([one, {"cross": 3}])
    with pytest.raises(TypeError, match="got"):
        Explorer([])
    about, stacks = input_stacks(stacked)
    assert about["target"] == " ".join(TARGET) and [n for n, _ in stacks] == list(stacked)


def test_several_traces_share_the_page_budget():
    long_source = [f"s{i}" for i in range(600)]  # a long encoder input: pooled maps
    big = stacked_trace(source=long_source)
    cfg = ExplorerConfig(page_budget=1_500_000)
    ex = Explorer(big, config=cfg, uid="ax-big")
    assert len(ex.to_page().encode()) <= cfg.page_budget
    data = page_data(ex)
    assert data["traces"][0]["pooled"] and data["traces"][2]["pooled"]
    assert not data["traces"][1]["pooled"]  # the short target keeps every weight
    # q/k of short stacks share qk_budget: three stacks hold no more than one would
    short = stacked_trace()
    tight = ExplorerConfig(qk_budget=3 * 4 * 2 * (5 + 8) * 8)  # 3 heads' worth in float32
    traces = page_data(Explorer(short, config=tight, uid="a"))["traces"]

    def qk_bytes(tr: dict) -> int:  # what the budget counts: q and k of each stored head
        per = 4 if tr["qk"]["dtype"] == "f32" else 2
        return len(tr["qk"]["heads"]) * (tr["Lq"] + tr["Lk"]) * tr["d"] * per

    alone = page_data(Explorer(short["cross"], config=tight, uid="b"))["traces"][0]
    assert len(alone["qk"]["heads"]) == 6 and alone["qk"]["dtype"] == "f32"  # all of it
    assert qk_bytes(alone) == tight.qk_budget
    assert sum(qk_bytes(tr) for tr in traces) <= tight.qk_budget  # three traces: shared
    assert all(tr["qk"]["heads"] for tr in traces)  # ... and each keeps at least a head


def test_image_trace_carries_its_picture_grid_and_prefix():
    t = image_trace(rows=3, cols=4, prefix=2)
    data = page_data(Explorer(t, uid="ax-img"))
    im = data["traces"][0]["image"]
    assert im["grid"] == [3, 4] and im["prefix"] == 2
    assert im["prefix_tokens"] == ["[CLS]", "[DIST]"]
    assert im["png"] == t.meta["input"]["image_png"]
    assert base64.b64decode(im["png"]).startswith(b"\x89PNG")
    plain = qk_trace(list("abcd"), None, stack="self", causal=True)
    assert page_data(Explorer(plain, uid="ax-p"))["traces"][0]["image"] is None


@pytest.mark.parametrize("field, value, message", [
    ("grid", [4, 4], r"'grid'\] must be a grid whose patches plus the prefix \(1\) are the "
                     r"trace's 21 queries"),
    ("grid", [4, 0], r"'grid'\] must be \[rows, cols\] of positive ints"),
    ("prefix", -1, r"'prefix'\] must be an int >= 0"),
    ("image_png", base64.b64encode(b"GIF89a....").decode(), r"'image_png'\] must be a base64 "
                                                              "PNG"),
    ("image_png", None, r"'image_png'\] must be a base64 PNG, got 'NoneType'"),
])
def test_image_description_is_checked_against_the_trace(field, value, message):
    t = image_trace()
    t.meta["input"][field] = value
    with pytest.raises(ValueError, match=message):
        image_input(t)
    with pytest.raises(ValueError, match=message):
        Explorer(t).payload()


def test_image_view_is_a_view_the_page_can_open_on():
    assert ExplorerConfig(view="image").view == "image"
    with pytest.raises(ValueError, match="ExplorerConfig.view must be one of"):
        ExplorerConfig(view="picture")


def test_saved_stacked_trace_explores_the_same(stacked, tmp_path):
    path = tmp_path / "s2s.safetensors"
    stacked.save(path)
    again = load_trace(path)
    assert isinstance(again, StackedTrace)
    a = page_data(Explorer(stacked, uid="x"))
    b = page_data(Explorer(again, uid="x"))
    assert a["inputs"] == b["inputs"] and a["traces"] == b["traces"]


def test_long_source_cross_attention_keeps_one_row_per_target_token():
    big = stacked_trace(source=[f"s{i}" for i in range(600)])
    data = page_data(Explorer(big, uid="ax-big"))
    enc, cross = data["traces"][0], data["traces"][2]
    assert enc["pooled"] and enc["block"] == enc["col_block"]  # self-attention: one size
    assert cross["pooled"] and cross["block"] == 1 and cross["col_block"] == 5
    assert cross["rows"] == TARGET and len(cross["cols"]) == 120
    maps = decode_blob(cross["weights"])
    t = big["cross"]
    for layer, head in ((0, 0), (2, 1)):
        w = t.head_weights(layer, head).double()  # the dense definition, blocks of 1 × 5
        dense = w.reshape(len(TARGET), 120, 5).sum(-1)
        assert (maps[layer, head] - dense).abs().max() <= cross["weights_error"] + 1e-6
        ones = torch.ones(len(TARGET), dtype=torch.float64)
        assert torch.allclose(maps[layer, head].sum(-1), ones, atol=1e-3)


def test_explore_traces_an_encoder_decoder_model_with_its_targets():
    from attnlab.models.registry import LoadedModel
    from attnlab.report import architectures as arch
    from attnlab.viz.explorer import explore

    bart = LoadedModel(name="tiny-bart", kind="hf-encoder", model=arch.tiny_bart(),
                       tokenizer=arch.word_tokenizer(), causal=False, num_layers=2,
                       num_heads=4, num_kv_heads=4, head_dim=8, max_length=32)
    ex = explore(bart, [arch.SOURCE, "the cat"], target=[arch.TARGET, "die katze"])
    assert [about["target"] for about, _ in ex.inputs] == [arch.TARGET, "die katze"]
    assert [[n for n, _ in stacks] for _, stacks in ex.inputs] == [["encoder", "decoder",
                                                                    "cross"]] * 2
    cross = ex.inputs[1][1][2][1]
    assert cross.tokens[1:] == ["die", "katze"] and cross.key_tokens == ["the", "cat"]
    with pytest.raises(ValueError, match=r"target must be one str or None per text \(2\)"):
        explore(bart, [arch.SOURCE, "the cat"], target=[arch.TARGET])


def test_explore_says_which_targets_it_cut_for_the_caller_to_announce(stacked):
    from attnlab.models.registry import LoadedModel
    from attnlab.report import architectures as arch
    from attnlab.viz.explorer import explore

    bart = LoadedModel(name="tiny-bart", kind="hf-encoder", model=arch.tiny_bart(),
                       tokenizer=arch.word_tokenizer(), causal=False, num_layers=2,
                       num_heads=4, num_kv_heads=4, head_dim=8, max_length=6)
    long_target = " ".join(["die katze"] * 6)
    ex = explore(bart, ["the cat sat", "the cat"], target=[long_target, "die katze"],
                 truncate=True)
    (i, kept, given), = ex.target_cuts()  # the first input's target only
    assert (i, kept) == (0, 6) and given > kept
    assert ex.inputs[0][1][1][1].seq_len == kept  # the decoder holds what was kept
    assert Explorer(stacked).target_cuts() == []  # nothing cut
    with pytest.raises(ValueError, match="6"):  # without truncate: refused, naming the limit
        explore(bart, ["the cat sat"], target=[long_target])


def test_the_page_opens_on_the_stack_asked_for(stacked):
    data = page_data(Explorer(stacked, uid="ax-s", stack="cross", layer=2, head=1))
    assert data["stack"] == "cross" and (data["layer"], data["head"]) == (2, 1)
    assert data["traces"][2]["qk"]["heads"][0] == [2, 1]  # its head's q/k kept first
    assert data["traces"][0]["qk"]["heads"][0] == [0, 0]  # the encoder has 2 layers only
    assert page_data(Explorer(stacked, uid="ax-s"))["stack"] == "encoder"
    with pytest.raises(ValueError, match=r"stack must be one of the first input's stacks "
                                         r"\['encoder', 'decoder', 'cross'\], got 'self'"):
        Explorer(stacked, stack="self")
    with pytest.raises(ValueError, match=r"layer, head must lie in \[0, 2\) x \[0, 3\)"):
        Explorer(stacked, layer=2)  # the encoder, where the page opens, has 2 layers


def test_explore_command_takes_a_target_for_an_encoder_decoder_folder(tmp_path, capsys):
    from attnlab.cli import main
    from attnlab.report import architectures as arch

    folder = tmp_path / "bart"
    arch.tiny_bart().save_pretrained(folder)
    arch.word_tokenizer().save_pretrained(folder)
    out = tmp_path / "bart.html"
    rc = main(["explore", "--model", str(folder), "--text", "the cat sat", "--target",
               "die katze saß", "--out", str(out), "--json"])
    assert rc == 0, capsys.readouterr().err
    info = json.loads(capsys.readouterr().out)
    assert info["tokens"] == [3, 4, 4]  # encoder, decoder (start token + 3), cross rows
    html = out.read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="(ax-[0-9a-f]+)-data">(.*?)</script>', html, re.S)[2])
    assert [s["name"] for s in data["inputs"][0]["stacks"]] == ["encoder", "decoder", "cross"]
    assert data["traces"][2]["key_tokens"] == ["the", "cat", "sat"]
    assert data["inputs"][0]["target"] == "die katze saß"
    rc = main(["explore", "--model", str(folder), "--text", "the cat", "--target", "\u200b",
               "--out", str(out), "--quiet"])
    assert rc == 2 and "--target has no visible character" in capsys.readouterr().err
