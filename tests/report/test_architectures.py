"""The report's "architectures" part: BART, ViT and Whisper (tiny, random weights) traced,
checked against their own output_attentions and shown in the explorer; the checks fail
for a wrong reference; the inputs made here are what they say; the part renders in
Chromium without errors, in both languages."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.report import architectures as arch
from attnlab.report.html import ReportContext
from attnlab.report.page import PROVIDERS, render_page
from attnlab.tracing import StackedTrace
from attnlab.tracing.attention import AttentionTrace
from attnlab.tracing.media import read_wav


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    t0 = time.perf_counter()
    sec = arch.build(ReportContext(out_dir=out, quiet=True))
    seconds = time.perf_counter() - t0
    path = out / "index.html"
    path.write_text(render_page([sec]), encoding="utf-8")
    return sec, path, seconds


@pytest.fixture(scope="module")
def tok():
    return arch.word_tokenizer()


def _payload(html: str, uid: str) -> dict:
    m = re.search(rf'id="{uid}-data">(.*?)</script>', html, re.S)
    assert m is not None, uid
    return json.loads(m.group(1))


def test_part_is_registered_after_the_real_models():
    names = list(PROVIDERS)
    assert PROVIDERS["architectures"] == "attnlab.report.architectures:build"
    assert names.index("architectures") > names.index("real-models")
    assert names.index("architectures") > names.index("explorer")


def test_every_stack_of_every_model_is_the_models_own_attention(built):
    sec, _, seconds = built
    assert sec.passed is True, sec.rows
    checks = {name: value for name, value, _ in sec.rows}
    want = ([f"bart {s}" for s in ("encoder", "decoder", "cross")] + ["vit self"] +
            [f"whisper {s}" for s in ("encoder", "decoder", "cross")])
    assert [n.split(":")[0] for n in checks] == want
    assert all(float(v) <= arch.WEIGHTS_TOL for v in checks.values())
    assert all(ok for _, _, ok in sec.rows)
    print(f"architectures part built in {seconds:.1f} s")


def test_explorers_show_each_architecture_with_its_stacks_and_labels(built):
    sec, _, _ = built
    bart = _payload(sec.html, "ax-arch-bart")
    assert [s["name"] for s in bart["inputs"][0]["stacks"]] == ["encoder", "decoder", "cross"]
    enc, dec, cross = bart["traces"]
    assert enc["tokens"] == arch.SOURCE.split()  # words, from the tokenizer made here
    assert dec["tokens"][1:] == arch.TARGET.split() and cross["tokens"] == dec["tokens"]
    assert cross["key_tokens"] == enc["tokens"] and cross["cross"] and dec["causal"]
    vit = _payload(sec.html, "ax-arch-vit")
    assert vit["view"] == "image" and vit["traces"][0]["image"]["grid"] == [6, 6]
    assert vit["traces"][0]["tokens"][:2] == ["[CLS]", "r0c0"]
    whisper = _payload(sec.html, "ax-arch-whisper")
    w_enc, w_dec, w_cross = whisper["traces"]
    assert w_enc["tokens"][:3] == ["0.00s", "0.02s", "0.04s"] and w_enc["Lq"] == 50
    assert w_cross["key_tokens"] == w_enc["tokens"] and w_cross["Lq"] == w_dec["Lq"]
    assert w_dec["tokens"][1:] == arch.SPEECH_TARGET.split()
    assert whisper["inputs"][0]["media"]["kind"] == "audio"
    assert "random" in sec.html and "随机" in sec.html  # said in both languages


def test_the_checks_fail_for_a_wrong_reference(tok):
    st, stacks, ref, _ = arch.trace_bart(tok)
    assert isinstance(st, StackedTrace)
    assert all(c.passed for c in arch.stack_checks(stacks, ref))
    swapped = dict(ref, encoder=ref["encoder"][::-1])  # layers in the wrong order
    bad = {c.name: c for c in arch.stack_checks(stacks, swapped)}
    assert not bad["encoder"].passed and bad["encoder"].weights_error > 1e-3
    assert bad["cross"].passed
    mixed = dict(ref, cross=ref["decoder"])  # the decoder's weights for the cross stack
    c = {c.name: c for c in arch.stack_checks(stacks, mixed)}["cross"]
    assert not c.shape_ok and not c.passed
    with pytest.raises(ValueError, match=r"no attention for stack 'decoder'; it holds "
                                         r"\['encoder'\]"):
        arch.stack_checks(stacks, {"encoder": ref["encoder"]})


def test_qk_recomputation_is_checked_too(tok):
    _, stacks, ref, _ = arch.trace_bart(tok)
    t = stacks["decoder"]
    broken = AttentionTrace(tokens=t.tokens, q=t.q * 1.5, k=t.k, lse=t.lse,
                            shapes=list(t.shapes), stack="decoder")
    c = arch.stack_checks({"decoder": broken}, ref)[0]
    assert c.qk_error > arch.QK_TOL and not c.passed


def test_the_drawing_and_the_chirp_have_the_structure_they_claim(tmp_path):
    img = np.asarray(arch.draw_image(96), dtype=np.int32)
    assert tuple(img[20, 2]) == (40, 90, 200) and tuple(img[20, 8]) == (250, 245, 230)
    assert tuple(img[70, 70]) == (220, 60, 40)  # the disc
    assert tuple(img[85, 27]) == (40, 160, 70)  # the triangle
    x = arch.chirp(1.0)
    crossings = np.flatnonzero(np.diff(np.signbit(x)))
    first, last = (np.sum(crossings < 4000), np.sum(crossings >= 12000))
    assert last > 3 * first  # rising: far more zero crossings at the end
    path = arch.write_wav(tmp_path / "c.wav", x)
    back = read_wav(path)
    assert back.shape == x.shape and np.abs(back - x).max() <= 1 / 32768 + 1e-9


@pytest.mark.browser
def test_the_part_renders_in_chromium_in_both_languages(page, built, artifacts_dir):
    _, path, _ = built
    page.set_viewport_size({"width": 1300, "height": 1000})
    page.goto(Path(path).as_uri())
    for uid in ("ax-arch-bart", "ax-arch-vit", "ax-arch-whisper"):
        page.wait_for_selector(f"#{uid}[data-ready]", timeout=20_000)
    assert page.locator("#ax-arch-bart .ax-stack option").count() == 3
    assert page.get_attribute("#ax-arch-bart", "data-stack") == "cross"  # opens on it
    assert page.get_attribute("#ax-arch-bart", "data-view") == "head"
    assert page.eval_on_selector_all("#ax-arch-bart .ax-ktokens text",
                                     "els => els.map(e => e.textContent)") == arch.SOURCE.split()
    assert page.locator("#ax-arch-vit .ax-patch").count() == 36  # opens on the image view
    assert page.get_attribute("#ax-arch-whisper", "data-stack") == "cross"
    assert page.get_attribute("#ax-arch-whisper", "data-view") == "matrix"
    assert page.locator("#ax-arch-whisper .ax-tok[data-row]").count() == len(
        arch.SPEECH_TARGET.split()) + 1
    cols = page.eval_on_selector_all("#ax-arch-whisper .ax-tok[data-col]",
                                      "els => els.map(e => e.textContent)")
    assert cols[0] == "0.00s" and len(cols) >= 25  # time positions (every other one labelled)
    page.locator("#architectures").screenshot(path=str(artifacts_dir / "report-architectures.png"))
    page.click("#lang")
    assert page.get_attribute("html", "data-lang") == "zh"
    assert page.text_content("#ax-arch-bart .ax-stack option >> nth=2") == "交叉注意力"
    # every visible text outside the explorers is Chinese, apart from names and data
    text = page.evaluate("""() => {
      const sec = document.getElementById('architectures').cloneNode(true);
      sec.querySelectorAll('.attnlab-explorer, script, style').forEach(e => e.remove());
      document.body.appendChild(sec);
      const walker = document.createTreeWalker(sec, NodeFilter.SHOW_TEXT);
      const out = [];
      while (walker.nextNode()) {
        const el = walker.currentNode.parentElement;
        if (el.closest('.en') === null) out.push(walker.currentNode.textContent);
      }
      sec.remove();
      return out.join(' ');
    }""")
    data = " ".join([arch.SOURCE, arch.TARGET, arch.SPEECH_TARGET])
    words = set(re.findall(r"[A-Za-z_]{3,}", text)) - set(re.findall(r"[A-Za-z_]{3,}", data))
    names = {"BART", "ViT", "Whisper", "transformers", "attnlab", "output_attentions", "WAV",
             "kHz", "pass"}
    assert words <= names, words - names
    assert "通过" in text and "编码器自注意力" in text
    page.locator("#architectures").screenshot(
        path=str(artifacts_dir / "report-architectures-zh.png"))


def test_the_trace_objects_are_what_the_explorer_was_given(tok):
    t, stacks, ref, what = arch.trace_vit(tok)
    assert isinstance(t, AttentionTrace) and list(stacks) == ["self"]
    assert t.meta["input"]["kind"] == "image" and t.seq_len == 37
    assert torch.cat(list(ref["self"])).shape == (2, 4, 37, 37)
    assert "48 × 48" in what[0] and "48 × 48" in what[1]
