"""The bench's report: a Markdown table of the rows and an SVG bar chart of GB/s against the copy line."""
from __future__ import annotations


def _who(report: dict):
    """A row's name, with the implementation that measured it where the report holds several."""
    both = len({r.get("implementation") for r in report["rows"]}) > 1
    return lambda r, name: f"{name} [{r.get('implementation')}]" if both else name


def table(report: dict) -> str:
    head = ["optimizer", "dtype", "param set", "tensors", "params", "ms/step", "GB/s", "of copy", "torch ms",
            "vs torch", "numpy ms", "vs numpy"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    who = _who(report)
    for r in report["rows"]:
        lines.append(" | ".join([
            who(r, r["optimizer"]), r["dtype"], r["param_set"] + (f" (x{r['scaled']:.2g})" if r.get("scaled") else ""),
            str(r["tensors"]),
            f"{r['numel']:,}", f(r["ms_per_step"], ".3f"), f(r["gbps"], ".1f"), f(r["frac_of_copy"], ".2f"),
            f(r["torch_ms"], ".3f"), f(r["ratio_vs_torch"], ".2f"), f(r["numpy_ms"], ".1f"),
            f(r["ratio_vs_numpy"], ".2g")]))
    for h in report.get("host_rows", []):
        lines.append(" | ".join([who(h, h["what"]), "float32", "20 x 50,000", "20", "1,000,000", f(h["wall_ms_per_step"], ".3f"),
                                 "-", "-", f(h.get("torch_wall_ms"), ".3f"), f(h.get("ratio_vs_torch"), ".2f"), "-",
                                 "-"]))
    return "\n".join("| " + ln + " |" for ln in lines)


def svg_plot(report: dict) -> str:
    """Achieved GB/s per optimizer and param set as bars, with the copy bandwidth as a line (no dependencies). Rows
    without a bytes model (the matrix optimizers) are left out."""
    rows, who = [r for r in report["rows"] if r["gbps"] is not None], _who(report)
    w, h, left, bottom, top = 60 + 28 * max(1, len(rows)), 360, 60, 110, 30
    ymax = max([report["copy_gbps"]] + [r["gbps"] for r in rows]) * 1.1
    y = lambda v: top + (h - top - bottom) * (1 - v / ymax)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 20}" height="{h}" font-family="sans-serif" font-size="10">',
           f'<text x="{left}" y="16" font-size="12">{report["adapter"]}: achieved bandwidth per optimizer step</text>',
           f'<line x1="{left}" y1="{y(0)}" x2="{w}" y2="{y(0)}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0)}" stroke="black"/>']
    for i in range(5):
        v = ymax * i / 4
        out.append(f'<text x="{left - 4}" y="{y(v) + 3}" text-anchor="end">{v:.0f}</text>')
    out.append(f'<text x="12" y="{(top + y(0)) / 2}" transform="rotate(-90 12 {(top + y(0)) / 2})">GB/s</text>')
    for i, r in enumerate(rows):
        x = left + 10 + 28 * i
        out.append(f'<rect x="{x}" y="{y(r["gbps"])}" width="20" height="{y(0) - y(r["gbps"])}" fill="#4878a8">'
                   f'<title>{who(r, r["optimizer"])} {r["dtype"]} {r["param_set"]}: {r["gbps"]:.1f} GB/s</title></rect>')
        out.append(f'<text x="{x + 10}" y="{y(0) + 8}" transform="rotate(60 {x + 10} {y(0) + 8})">'
                   f'{who(r, r["optimizer"])} {r["dtype"]} {r["param_set"]}</text>')
    cy = y(report["copy_gbps"])
    out.append(f'<line x1="{left}" y1="{cy}" x2="{w}" y2="{cy}" stroke="#c03030" stroke-dasharray="5,3"/>')
    out.append(f'<text x="{w}" y="{cy - 4}" text-anchor="end" fill="#c03030">copy {report["copy_gbps"]:.0f} GB/s</text>')
    out.append("</svg>")
    return "\n".join(out)
