"""The bench result for people: one table row per cell, then the summary keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnlab.bench.suite import BenchResult, ResultRow

__all__ = ["render_table", "render_summary", "CONTENDERS"]

#: Column order of the table (those measured are shown).
CONTENDERS = ["torch_sdpa", "fused", "chunked", "linear", "naive", "explicit", "torch_mha",
              "attnlab_mha"]


def render_table(result: BenchResult) -> Any:
    """A rich Table: one row per cell, one column per contender (ms), ratios at the end."""
    from rich.table import Table

    rows = result["results"]
    present = [nm for nm in CONTENDERS if any(r["contender"] == nm for r in rows)]
    t = Table(title="attnlab bench (ms, median; ×: speed-up of attnlab, >1 = faster)")
    for col in ["device", "N", "causal", "mode", *present, "fused×", "explicit×", "mha×",
                "fused %peak"]:
        t.add_column(col, justify="right", no_wrap=True)
    cells: dict[tuple, dict[str, ResultRow]] = {}
    for r in rows:
        cells.setdefault((r["device"], r["n"], r["causal"], r["mode"]), {})[r["contender"]] = r

    def ratio(c: dict[str, ResultRow], ours: str, theirs: str) -> str:
        if ours in c and theirs in c:
            return f"{c[theirs]['ms'] / c[ours]['ms']:.2f}"
        return "-"

    for (dev, n, causal, mode), c in cells.items():
        fused = c.get("fused")
        frac = None if fused is None else fused["frac_peak"]
        t.add_row(dev, str(n), "yes" if causal else "no", mode,
                  *[f"{c[nm]['ms']:.1f}" if nm in c else "-" for nm in present],
                  ratio(c, "fused", "torch_sdpa"), ratio(c, "explicit", "naive"),
                  ratio(c, "attnlab_mha", "torch_mha"),
                  f"{100 * frac:.0f}%" if frac is not None else "-")
    return t


def render_summary(result: BenchResult) -> str:
    """The targets, met or not, the GEMM rate, the machine and the long-sequence probe."""
    lines = [f"GEMM rate: {result['gemm_gflops']} GFLOP/s   machine: {result['machine']}"]
    for key, tgt in result["targets"].items():
        val = tgt["value"]
        shown = f"{val:.3f}" if isinstance(val, float) else str(val)
        mark = {True: "met", False: "NOT met", None: "not measured"}[tgt["met"]]
        lines.append(f"  {key:28s} {shown:>10s}   target {tgt['target']:8s} {mark}")
    lp = result["long_probe"]
    lines.append(f"  long probe: N={lp['n']}, {lp['query_rows']} query rows, peak MiB "
                 f"{lp['peak_mb']}, seconds {lp['seconds']}")
    if lp.get("error"):
        lines.append(f"  long probe error: {lp['error']}")
    mem = [r for r in result["results"] if r.get("peak_mb") is not None]
    if mem:
        n = max(r["n"] for r in mem)
        peaks = ", ".join(f"{r['contender']} {r['peak_mb']}" for r in mem
                          if r["n"] == n and r["device"] == "cpu")
        lines.append(f"  peak extra MiB of one forward at N={n}: {peaks}")
    return "\n".join(lines)
