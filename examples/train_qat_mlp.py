"""Quantization-aware training of the digits network in WGSL (train_wgsl_mlp.py's data, model, initialisation and
batches), with int8 and with int4 weights and 8-bit activations, against torch.ao's QAT of the same model.

Forward and backward are WGSL kernels (train_qat_mlp.wgsl) on the optimizer's device after
``rlx_gpu.qat.wgsl()``'s functions: the weights come from the optimizer's ``qat=`` export (per-output-channel symmetric codes and scales, written by
``opt.step()`` itself), read as ``code * scale``; activations are fake-quantized where torch.ao's eager QAT puts
its fake-quants (the input, both layers' outputs: uint8 affine with moving-average min/max observers, reduce_range
as torch.ao's default qconfig; the tanh output: fixed scale 1/128, zero point 128), with ``rlx_gpu.qat``'s device
observers recording the kernels' buffers in the same submission; the backward is straight-through (torch's clamp
masks). torch.ao: ``get_default_qat_qconfig("x86")`` and ``prepare_qat`` (int4: the same with a weight range of
[-8, 7]), the same AdamW, evaluated with observers frozen. fp32: train_wgsl_mlp.py's network. Test accuracy on the
digits test split, mean over seeds (initialisations). Run: python examples/train_qat_mlp.py [--steps N]
[--seeds K] [--device SEL] [--json FILE]
"""
import argparse
import time
import warnings
from pathlib import Path

import numpy as np

import rlx_gpu
from rlx_gpu import qat
from rlx_gpu.tools.cli import describe
from train_wgsl_mlp import BATCH, HID, IN, OUT, GpuMLP, digits, init_params, torch_run

WG = 64
ACT = dict(dtype="quint8", reduce_range=True)  # torch.ao's default activation observer: uint8 in [0, 127]

# the kernels: train_qat_mlp.wgsl beside this file, after rlx_gpu.qat's functions and the model's shapes
KERNELS = f"const IN: u32 = {IN}u;\nconst HID: u32 = {HID}u;\nconst OUT: u32 = {OUT}u;\n" + \
    (Path(__file__).parent / "train_qat_mlp.wgsl").read_text()
# One step's dispatches: (entry point, threads per batch row, further threads), or the buffer an observer records
EVAL = (("quant_x", IN, 0), ("fc1", HID, 0), ("act", HID, 0), ("fc2", OUT, 0), ("output", 1, 0))
TRAIN = ("x", EVAL[0], EVAL[1], "z1", EVAL[2], EVAL[3], "z2", EVAL[4], ("back_hidden", HID, 0),
         ("grad_w2", 0, OUT * HID), ("grad_b2", 0, OUT), ("grad_w1", 0, HID * IN), ("grad_b1", 0, HID))


def qat_params(seed):
    """train_wgsl_mlp.py's initialisation, weights as torch.nn.Linear stores them: (out, in)."""
    p = init_params(seed)
    return {"w1": np.ascontiguousarray(p["w1"].T), "b1": p["b1"], "w2": np.ascontiguousarray(p["w2"].T), "b2": p["b2"]}


class GpuQatMLP:
    """The kernels above on one optimizer's params, grads and ``qat=`` copies, with device-resident data."""

    def __init__(self, opt, train, test, bits):
        dev, self.opt, self.dev = opt.device, opt, opt.device
        (xt, yt), (xv, yv) = train, test
        self.data = {"x": dev.buffer(xt.nbytes, "x", data=xt), "y": dev.buffer(yt.nbytes, "y", data=yt),
                     "xv": dev.buffer(xv.nbytes, "xv", data=xv), "yv": dev.buffer(yv.nbytes, "yv", data=yv)}
        self.batches, self.n_test = len(yt) // BATCH, len(yv)
        self.obs = {k: qat.MovingAverageMinMaxObserver(**ACT) for k in ("x", "z1", "z2")}
        c = dict(WG=WG, BITS=bits, WMAX=float(2 ** (bits - 1) - 1), AMIN=float(self.obs["x"].quant_min),
                 AMAX=float(self.obs["x"].quant_max))
        code = qat.wgsl() + KERNELS
        self.train = {t[0]: rlx_gpu.Program(dev, code, t[0], label="qat-mlp", B=BATCH, **c) for t in TRAIN
                      if not isinstance(t, str)}
        self.eval = {e[0]: rlx_gpu.Program(dev, code, e[0], label="qat-mlp", B=len(yv), **c) for e in EVAL}
        rows = max(BATCH, len(yv))
        self.work = {k: dev.buffer(4 * rows * n, k) for k, n in (("xq", IN), ("z1", HID), ("h", HID), ("hq", HID),
                                                               ("z2", OUT), ("dz", OUT), ("dh", HID), ("loss", 1),
                                                               ("hit", 1))}
        self.p = {k: opt.params[k] for k in ("w1", "b1", "w2", "b2")}
        self.g = {"g_" + k: opt.grads[k] for k in ("w1", "b1", "w2", "b2")}
        self.q = {f"{w}{part[0]}": opt.qat[w].binding(part) for w in ("w1", "w2") for part in ("codes", "scale")}

    def _bufs(self, x, y):
        qp = {f"qp{k[-1]}": self.obs[k].qparams.binding() for k in self.obs if self.obs[k].device is not None}
        return dict(self.p, **self.g, **self.q, **self.work, **qp, x=x, y=y)

    def _run(self, enc, progs, rows, entry, per_row, more, bufs):
        prog = progs[entry]
        prog.record(enc, -(-(rows * per_row + more) // WG), **{k: v for k, v in bufs.items() if k in prog.bindings})

    def gradients(self, i: int) -> None:
        """Forward (observing the input and both layers' outputs), loss and backward of batch i into the grads."""
        b = i % self.batches
        x = (self.data["x"], 4 * IN * BATCH * b, 4 * IN * BATCH)
        y = (self.data["y"], 4 * BATCH * b, 4 * BATCH)
        enc = self.dev.encoder()
        seen = {"x": (x, IN), "z1": ((self.work["z1"], 0, 4 * BATCH * HID), HID),
                "z2": ((self.work["z2"], 0, 4 * BATCH * OUT), OUT)}
        for t in TRAIN:
            if isinstance(t, str):  # (the kernels' own buffer, observed in this submission)
                self.obs[t].record(enc, seen[t][0], shape=(BATCH, seen[t][1]), device=self.dev)
            else:
                self._run(enc, self.train, BATCH, *t, self._bufs(x, y))
        self.dev.submit(enc)

    def step(self, i: int) -> None:
        self.gradients(i)
        self.opt.step()  # (writes w1's and w2's codes and scales for the next forward too)

    def batch_loss(self) -> float:
        return float(self.dev.read(self.work["loss"], 0, 4 * BATCH, out=np.empty(BATCH, np.float32)).mean())

    def test_accuracy(self) -> float:
        """The fake-quantized network on the test split, the observers frozen (torch.ao's eval)."""
        enc = self.dev.encoder()
        for e in EVAL:
            self._run(enc, self.eval, self.n_test, *e, self._bufs(self.data["xv"], self.data["yv"]))
        self.dev.submit(enc)
        hits = self.dev.read(self.work["hit"], 0, 4 * self.n_test, out=np.empty(self.n_test, np.uint32))
        return float(hits.mean())


def gpu_run(params, train, test, steps, lr, wd, bits, device):
    """(test accuracy, final batch loss, steps/s) of QAT on the device."""
    spec = "int8/channel" if bits == 8 else "int4/channel"
    opt = rlx_gpu.AdamW(params, lr=lr, weight_decay=wd, qat={"w1": spec, "w2": spec}, device=device)
    mlp = GpuQatMLP(opt, train, test, bits)
    mlp.step(0)
    opt.device.sync()
    t0 = time.perf_counter()
    for i in range(1, steps):
        mlp.step(i)
    loss = mlp.batch_loss()
    return mlp.test_accuracy(), loss, (steps - 1) / (time.perf_counter() - t0)


def torch_ao_run(params, train, test, steps, lr, wd, bits):
    """torch.ao's eager-mode QAT of the same model (QuantStub, Linear, Tanh, Linear, DeQuantStub), initialisation,
    batches and AdamW: the test accuracy of the fake-quantized model, observers frozen."""
    import torch
    import torch.ao.quantization as tq
    warnings.filterwarnings("ignore", module="torch.ao")
    warnings.filterwarnings("ignore", message=".*torch.ao.quantization is deprecated.*")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.fc1, self.act = tq.QuantStub(), torch.nn.Linear(IN, HID), torch.nn.Tanh()
            self.fc2, self.dequant = torch.nn.Linear(HID, OUT), tq.DeQuantStub()

        def forward(self, x):
            return self.dequant(self.fc2(self.act(self.fc1(self.quant(x)))))

    net = Net()
    with torch.no_grad():
        for k in ("w1", "b1", "w2", "b2"):
            getattr(getattr(net, "fc" + k[1]), "weight" if k[0] == "w" else "bias").copy_(torch.tensor(params[k]))
    qc = tq.get_default_qat_qconfig("x86")
    if bits == 4:
        qc = tq.QConfig(activation=qc.activation, weight=tq.FusedMovingAvgObsFakeQuantize.with_args(
            observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-8, quant_max=7, dtype=torch.qint8,
            qscheme=torch.per_channel_symmetric))
    net.qconfig = qc
    net.train()
    tq.prepare_qat(net, inplace=True)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=wd)
    (xt, yt), (xv, yv) = train, test
    xt_, yt_ = torch.tensor(xt), torch.tensor(yt.astype(np.int64))
    for i in range(steps):
        b = i % (len(yt) // BATCH)
        loss = torch.nn.functional.cross_entropy(net(xt_[b * BATCH:(b + 1) * BATCH]), yt_[b * BATCH:(b + 1) * BATCH])
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.apply(tq.disable_observer)
    net.eval()
    with torch.no_grad():
        return float((net(torch.tensor(xv)).argmax(1).numpy() == yv).mean())


def fp32_run(seed, train, test, steps, lr, wd, device):
    """train_wgsl_mlp.py's float32 network on the same initialisation and batches: its test accuracy."""
    opt = rlx_gpu.AdamW(init_params(seed), lr=lr, weight_decay=wd, device=device)
    mlp = GpuMLP(opt, train, test)
    for i in range(steps):
        mlp.step(i)
    return mlp.test_accuracy()


def main(argv=None):
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", default="", help="write every accuracy to this file")
    args = ap.parse_args(argv)
    dev = rlx_gpu.get_device(args.device)
    train, test = digits()
    lr, wd = 3e-3, 1e-4
    print(f"adapter: {dev.name} ({dev.info['backend']}, {dev.info['type']})")
    print(f"digits: {len(train[1])} training and {len(test[1])} test images; {args.steps} steps of {BATCH}; "
          f"{args.seeds} seeds")
    acc = {k: [] for k in ("fp32", "int8", "int4", "torch fp32", "torch.ao int8", "torch.ao int4")}
    for seed in range(args.seeds):
        acc["fp32"].append(fp32_run(seed, train, test, args.steps, lr, wd, dev))
        for bits in (8, 4):
            a, loss, rate = gpu_run(qat_params(seed), train, test, args.steps, lr, wd, bits, dev)
            acc[f"int{bits}"].append(a)
            print(f"seed {seed} int{bits}: test accuracy {a:.4f}, final batch loss {loss:.4f}, {rate:.0f} steps/s")
        try:
            import torch
            torch.set_num_threads(1)  # (a model this small runs fastest on one thread)
            acc["torch fp32"].append(torch_run(init_params(seed), train, test, args.steps, lr, wd)[0])
            for bits in (8, 4):
                acc[f"torch.ao int{bits}"].append(torch_ao_run(qat_params(seed), train, test, args.steps, lr, wd, bits))
        except ImportError:
            print("torch is not installed: no torch.ao comparison")
    mean = {k: float(np.mean(v)) for k, v in acc.items() if v}
    print("test accuracy, mean of", args.seeds, "seeds (each seed):")
    for k, m in mean.items():
        print(f"  {k:14s} {m:.4f}  ({', '.join(f'{a:.4f}' for a in acc[k])})")
    print(f"final loss {loss:.4f}, test accuracy int8 {mean['int8']:.4f}, int4 {mean['int4']:.4f}")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"adapter": dev.name, "steps": args.steps, "seeds": args.seeds, "accuracy": acc, "mean": mean},
                      f, indent=1)
    full = args.steps >= 1500 and args.seeds >= 3  # the targets; a short run has looser ones
    tol = {8: 0.01, 4: 0.03} if full else {8: 0.03, 4: 0.06}
    for bits in (8, 4):
        gap = mean["fp32"] - mean[f"int{bits}"]
        assert gap <= tol[bits], f"int{bits} is {gap:.4f} below fp32 ({mean['fp32']:.4f}), more than {tol[bits]}"
    return mean


if __name__ == "__main__":
    main()
