"""The summary of benchmarks/tc_gemm_bench.py's records: a table, then the decisions the data makes (the best kernel
per shape and device, what robustness costs, Newton-Schulz and Muon against torch), printed last."""


def _name(r):
    return r.get("variant") or r.get("dtype") or "tiled gemm16"


def table(rows) -> None:
    print("\n== summary (TF/s; ms) ==")
    for r in rows:
        if r["case"] in ("gemm", "torch_gemm", "gemm16_tiled") and "tflops" in r:
            ok = "" if r.get("correct", True) else "  WRONG rel_err %.1e" % r["rel_err"]
            epi = f" {r['epilogue']}" if r.get("epilogue") else ""
            print(f"{r['case']:12s} {r.get('device', 'cuda'):8s} {str(r['shape']):24s} {_name(r) + epi:44s} "
                  f"{r['tflops']:8.1f} {r['ms']:9.3f}{ok}")
        elif r["case"] in ("ns_gpt2", "torch_ns", "torch_muon", "muon") and "ms" in r:
            what = r.get("gemms") or r.get("what") or f"Muon ns_dtype={r.get('ns_dtype')} ({r.get('ns_path')})"
            print(f"{r['case']:12s} {r.get('device', 'cuda'):8s} {what:70s} {r['ms']:9.3f}")
        elif "error" in r:
            print(f"{r['case']:12s} ERROR {r.get('variant', r.get('phase', ''))}: {str(r['error'])[:300]}")


def decisions(rows, ok) -> None:
    print("\n== decisions ==")
    shapes = sorted({s for _, _, s in ok})
    for s in shapes:
        for dev in ("fast", "norobust", "default"):
            got = sorted(((t, v) for (d, v, sh), t in ok.items() if d == dev and sh == s), reverse=True)
            if got:
                print(f"best {dev:8s} {s:34s} {got[0][1]:44s} {got[0][0]:7.1f} TF/s"
                      + (f"  (next: {got[1][1]} {got[1][0]:.1f})" if len(got) > 1 else ""))
    for s in shapes:  # what Dawn's robustness (and workgroup zero-initialisation) cost: best against best
        best = {dev: max((t for (d, _, sh), t in ok.items() if d == dev and sh == s), default=None)
                for dev in ("fast", "norobust", "default")}
        if best["fast"] and best["default"]:
            print(f"robustness {s:34s} default/fast {best['default'] / best['fast']:.2f}"
                  + (f", norobust/fast {best['norobust'] / best['fast']:.2f}" if best["norobust"] else ""))
    torch_muon = [r["ms"] for r in rows if r["case"] == "torch_muon" and "ms" in r]
    for r in rows:
        if r["case"] == "muon" and "ms" in r and torch_muon:
            print(f"Muon {r['device']:8s} {r['ns_dtype']:8s} {r['ms']:8.2f} ms: {torch_muon[0] / r['ms']:.2f}x "
                  f"torch.optim.Muon ({torch_muon[0]:.2f} ms; target >= 1.5x)")
    ns = [r for r in rows if r["case"] == "ns_gpt2" and "ms" in r]
    for dev in ("fast", "norobust", "default"):
        mine = sorted((r["ms"], r["gemms"]) for r in ns if r["device"] == dev)
        if mine:
            print(f"Newton-Schulz GPT-2 {dev:8s} best: {mine[0][1]} {mine[0][0]:.2f} ms; all: "
                  + ", ".join(f"{g} {m:.2f}" for m, g in mine))


def summary(rows, ok) -> None:
    """The table, then the decisions."""
    table(rows)
    decisions(rows, ok)
