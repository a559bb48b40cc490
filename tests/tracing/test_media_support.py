"""The support matrix's vision and speech rows: every family of those kinds in the installed
transformers is exact (checked on its tiny model), refused or without attention (with the
reason), or not yet; never wrong."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import attnlab.tracing.media as media  # noqa: E402
import attnlab.tracing.support as support  # noqa: E402

KINDS = dict(support.families())
MEDIA = [f for f, k in KINDS.items() if k in ("vision", "speech")]
EXACT = ("vit", "vit_msn", "deit", "beit", "dinov2", "dinov2_with_registers", "dinov3_vit",
         "clip", "siglip", "siglip_vision_model", "ijepa", "whisper", "wav2vec2", "hubert",
         "data2vec-audio", "sew", "unispeech", "unispeech-sat", "wav2vec2-conformer",
         "chinese_clip", "altclip", "metaclip_2", "owlvit", "owlv2", "clipseg", "blip-2", "mlcd",
         "aimv2_vision_model", "tipsv2", "dpt", "pixio", "moonshine", "speech_to_text",
         "parakeet_ctc", "wav2vec2-bert", "audio-spectrogram-transformer")


@pytest.fixture(scope="module")
def rows() -> dict[str, support.FamilyResult]:
    return {r.family: r for r in support.support_matrix(MEDIA)}


def test_media_rows(rows):
    for family, r in rows.items():
        assert r.status != "wrong", (family, r.reason)
        if r.status == "exact":
            assert r.max_weight_error <= support.EXACT_TOL, family
            assert r.max_recompute_error <= support.RECOMPUTE_TOL, family
            assert r.layers == 2 and r.heads == 4 and r.reason == ""
        else:
            assert r.reason.startswith(f"{r.status}: ") and len(r.reason) > 40, r.reason
    exact = {f for f, r in rows.items() if r.status == "exact"}
    assert set(EXACT) <= exact, {f: rows[f].reason for f in EXACT if f not in exact}
    assert rows["whisper"].features == ["audio: encoder 50x50, decoder 5x5, cross 5x50"]
    assert rows["deit"].features == ["image: self 18x18"]  # [CLS], [DIST], 16 patches
    for f in ("swin", "swinv2", "vit_mae", "pvt"):
        assert rows[f].status == "refused", (f, rows[f].reason)
    assert "windowed" in rows["swin"].reason
    assert rows["pixio"].features == ["image: self 24x24"]  # 8 class tokens, 16 patches
    counts = support.counts(rows.values())
    assert counts["exact"] >= 30 and counts["wrong"] == 0
    for f, cls in (("data2vec-vision", "Data2VecVisionSelfAttention"),
                   ("blip", "BlipAttention"), ("vitdet", "VitDetAttention"),
                   ("wavlm", "WavLMAttention"), ("sew-d", "DisentangledSelfAttention")):
        assert rows[f].status == "refused" and cls in rows[f].reason, rows[f].reason
    assert rows["wav2vec2"].features == ["audio: self 159x159"]
    assert rows["sew"].features == ["audio: self 79x79"]  # frames squeezed by 2
    for f in ("convnext", "resnet"):
        assert rows[f].status == "no attention"
    assert "traced for Whisper" in rows["parakeet_tdt"].reason
    assert rows["parakeet_ctc"].features == ["audio: self 13x13"]  # 1 s, a position per 80 ms
    assert rows["audio-spectrogram-transformer"].features == ["audio: self 23x23"]  # 2 + 3x7
    assert rows["speech_to_text"].features == ["audio: encoder 12x12, decoder 5x5, cross 5x12"]
    assert rows["yolos"].status == "not yet" and "ViT-like" in rows["yolos"].reason


def test_the_check_tells_a_wrong_trace(monkeypatch):
    """A trace of other pixels than the reference's is reported wrong, not exact."""
    real = media.image_inputs
    calls = []

    def shifted(tower, img, folder):
        pixels, seen, how = real(tower, img, folder)
        calls.append(1)
        return (pixels + 0.5 if len(calls) == 1 else pixels), seen, how

    monkeypatch.setattr(media, "image_inputs", shifted)
    r = support.check_family("vit")
    assert r.status == "wrong" and "differ from output_attentions" in r.reason


def test_mislabelled_prefix_is_wrong_not_exact(monkeypatch):
    monkeypatch.setitem(media.VISION_FAMILIES, "deit", lambda _c: ["[CLS]"])
    r = support.check_family("deit")
    assert r.status == "wrong" and "refused rather than mislabelled" in r.reason
