"""Train a handwritten-digit classifier end to end on the GPU: forward, softmax cross-entropy and backward are
WGSL kernels on the optimizer's device, the gradients are written straight into ``opt.grads[name]`` and
``opt.step()`` reads them there. Nothing goes back to the host but the loss every ``--log-every`` steps and the
test accuracy at the end. Then the same model, initialisation and batches with torch on the CPU (if torch is
installed), for comparison.

Data: scikit-learn's bundled digits (1,797 8x8 images, no download), 80% train / 20% test. Model: 64 -> 128
(tanh) -> 10, AdamW. Run: python examples/train_wgsl_mlp.py [--steps N] [--plot FILE.png] [--device SEL]
"""
import argparse
import time

import numpy as np

import rlx_gpu
from rlx_gpu.tools.cli import describe

IN, HID, OUT, BATCH, WG = 64, 128, 10, 128, 64

# The model's kernels. Shapes are constants of the module; `B` (rows in the batch) is an override constant, so the
# test set (one batch of all its rows) compiles the same source with another B.
KERNELS = f"""
const IN: u32 = {IN}u;
const HID: u32 = {HID}u;
const OUT: u32 = {OUT}u;
override B: u32 = {BATCH}u;
override WG: u32 = {WG}u;

@group(0) @binding(0) var<storage, read> x: array<f32>;          // [B, IN]
@group(0) @binding(1) var<storage, read> y: array<u32>;          // [B]
@group(0) @binding(2) var<storage, read> w1: array<f32>;         // [IN, HID]
@group(0) @binding(3) var<storage, read> b1: array<f32>;         // [HID]
@group(0) @binding(4) var<storage, read> w2: array<f32>;         // [HID, OUT]
@group(0) @binding(5) var<storage, read> b2: array<f32>;         // [OUT]
@group(0) @binding(6) var<storage, read_write> h: array<f32>;    // [B, HID] tanh activations
@group(0) @binding(7) var<storage, read_write> dz: array<f32>;   // [B, OUT] d loss / d logits
@group(0) @binding(8) var<storage, read_write> dh: array<f32>;   // [B, HID] d loss / d pre-activation
@group(0) @binding(9) var<storage, read_write> loss: array<f32>; // [B] per-row loss
@group(0) @binding(10) var<storage, read_write> hit: array<u32>; // [B] 1 where the argmax is the label
@group(0) @binding(11) var<storage, read_write> g_w1: array<f32>;
@group(0) @binding(12) var<storage, read_write> g_b1: array<f32>;
@group(0) @binding(13) var<storage, read_write> g_w2: array<f32>;
@group(0) @binding(14) var<storage, read_write> g_b2: array<f32>;

@compute @workgroup_size(WG)
fn hidden(@builtin(global_invocation_id) id: vec3<u32>) {{     // h = tanh(x w1 + b1)
    let t = id.x;
    if (t >= B * HID) {{ return; }}
    let b = t / HID; let j = t % HID;
    var s = b1[j];
    for (var k = 0u; k < IN; k++) {{ s += x[b * IN + k] * w1[k * HID + j]; }}
    h[t] = tanh(s);
}}

@compute @workgroup_size(WG)
fn output(@builtin(global_invocation_id) id: vec3<u32>) {{     // softmax cross-entropy, mean over the batch
    let b = id.x;
    if (b >= B) {{ return; }}
    var z: array<f32, OUT>;
    var top = 0u;
    for (var c = 0u; c < OUT; c++) {{
        var s = b2[c];
        for (var j = 0u; j < HID; j++) {{ s += h[b * HID + j] * w2[j * OUT + c]; }}
        z[c] = s;
        if (s > z[top]) {{ top = c; }}
    }}
    var sum = 0.0;
    for (var c = 0u; c < OUT; c++) {{ sum += exp(z[c] - z[top]); }}
    let label = y[b];
    loss[b] = log(sum) - (z[label] - z[top]);
    hit[b] = select(0u, 1u, top == label);
    for (var c = 0u; c < OUT; c++) {{
        let p = exp(z[c] - z[top]) / sum;
        dz[b * OUT + c] = (p - select(0.0, 1.0, c == label)) / f32(B);
    }}
}}

@compute @workgroup_size(WG)
fn back_hidden(@builtin(global_invocation_id) id: vec3<u32>) {{  // dh = (dz w2^T) * (1 - h^2)
    let t = id.x;
    if (t >= B * HID) {{ return; }}
    let b = t / HID; let j = t % HID;
    var s = 0.0;
    for (var c = 0u; c < OUT; c++) {{ s += dz[b * OUT + c] * w2[j * OUT + c]; }}
    dh[t] = s * (1.0 - h[t] * h[t]);
}}

@compute @workgroup_size(WG)
fn grad_w2(@builtin(global_invocation_id) id: vec3<u32>) {{     // h^T dz into the optimizer's grad slot
    let t = id.x;
    if (t >= HID * OUT) {{ return; }}
    let j = t / OUT; let c = t % OUT;
    var s = 0.0;
    for (var b = 0u; b < B; b++) {{ s += h[b * HID + j] * dz[b * OUT + c]; }}
    g_w2[t] = s;
}}

@compute @workgroup_size(WG)
fn grad_b2(@builtin(global_invocation_id) id: vec3<u32>) {{
    let c = id.x;
    if (c >= OUT) {{ return; }}
    var s = 0.0;
    for (var b = 0u; b < B; b++) {{ s += dz[b * OUT + c]; }}
    g_b2[c] = s;
}}

@compute @workgroup_size(WG)
fn grad_w1(@builtin(global_invocation_id) id: vec3<u32>) {{     // x^T dh
    let t = id.x;
    if (t >= IN * HID) {{ return; }}
    let k = t / HID; let j = t % HID;
    var s = 0.0;
    for (var b = 0u; b < B; b++) {{ s += x[b * IN + k] * dh[b * HID + j]; }}
    g_w1[t] = s;
}}

@compute @workgroup_size(WG)
fn grad_b1(@builtin(global_invocation_id) id: vec3<u32>) {{
    let j = id.x;
    if (j >= HID) {{ return; }}
    var s = 0.0;
    for (var b = 0u; b < B; b++) {{ s += dh[b * HID + j]; }}
    g_b1[j] = s;
}}
"""


def digits(seed=0):
    from sklearn.datasets import load_digits
    d = load_digits()
    x, y = (d.data / 16.0).astype(np.float32), d.target.astype(np.uint32)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    n = int(0.8 * len(y)) // BATCH * BATCH  # whole batches of the training set
    return (x[:n], y[:n]), (x[n:], y[n:])


def init_params(seed=0):
    rng = np.random.default_rng(seed)  # torch.nn.Linear's: uniform(+-1/sqrt(fan_in))
    u = lambda shape, fan: rng.uniform(-1, 1, shape).astype(np.float32) / np.float32(np.sqrt(fan))  # noqa: E731
    return {"w1": u((IN, HID), IN), "b1": u(HID, IN), "w2": u((HID, OUT), HID), "b2": u(OUT, HID)}


class GpuMLP:
    """The kernels above bound to one optimizer's params and grads and to device-resident data."""

    def __init__(self, opt, train, test):
        dev, self.opt = opt.device, opt
        self.dev = dev
        (xt, yt), (xv, yv) = train, test
        self.data = {"x": dev.buffer(xt.nbytes, "x", data=xt), "y": dev.buffer(yt.nbytes, "y", data=yt),
                     "xv": dev.buffer(xv.nbytes, "xv", data=xv), "yv": dev.buffer(yv.nbytes, "yv", data=yv)}
        self.batches, self.n_test = len(yt) // BATCH, len(yv)
        self.train = {e: rlx_gpu.Program(dev, KERNELS, e, label="mlp") for e in
                      ("hidden", "output", "back_hidden", "grad_w2", "grad_b2", "grad_w1", "grad_b1")}
        self.eval = {e: rlx_gpu.Program(dev, KERNELS, e, label="mlp", B=len(yv)) for e in ("hidden", "output")}
        rows = max(BATCH, len(yv))
        self.work = {"h": dev.buffer(4 * rows * HID, "h"), "dz": dev.buffer(4 * rows * OUT, "dz"),
                     "dh": dev.buffer(4 * rows * HID, "dh"), "loss": dev.buffer(4 * rows, "loss"),
                     "hit": dev.buffer(4 * rows, "hit")}
        self.p = {k: opt.params[k] for k in ("w1", "b1", "w2", "b2")}
        self.g = {"g_" + k: opt.grads[k] for k in ("w1", "b1", "w2", "b2")}

    def step(self, i: int) -> None:
        """Forward, loss and backward of batch i into the grad slots, then the optimizer step: one submission each."""
        self.gradients(i)
        self.opt.step()

    def gradients(self, i: int) -> None:
        b = i % self.batches
        x = (self.data["x"], 4 * IN * BATCH * b, 4 * IN * BATCH)
        y = (self.data["y"], 4 * BATCH * b, 4 * BATCH)
        bufs = dict(self.p, **self.g, **self.work, x=x, y=y)
        enc = self.dev.encoder()
        for e, n in (("hidden", BATCH * HID), ("output", BATCH), ("back_hidden", BATCH * HID),
                     ("grad_w2", HID * OUT), ("grad_b2", OUT), ("grad_w1", IN * HID), ("grad_b1", HID)):
            prog = self.train[e]
            prog.record(enc, -(-n // WG), **{k: v for k, v in bufs.items() if k in prog.bindings})
        self.dev.submit(enc)

    def batch_loss(self) -> float:
        return float(self.dev.read(self.work["loss"], 0, 4 * BATCH, out=np.empty(BATCH, np.float32)).mean())

    def test_accuracy(self) -> float:
        bufs = dict(self.p, **self.work, x=self.data["xv"], y=self.data["yv"])
        enc = self.dev.encoder()
        for e, n in (("hidden", self.n_test * HID), ("output", self.n_test)):
            prog = self.eval[e]
            prog.record(enc, -(-n // WG), **{k: v for k, v in bufs.items() if k in prog.bindings})
        self.dev.submit(enc)
        hits = self.dev.read(self.work["hit"], 0, 4 * self.n_test, out=np.empty(self.n_test, np.uint32))
        return float(hits.mean())


def torch_run(params, train, test, steps, lr, wd):
    """The same model, initialisation and batches with torch.optim.AdamW on the CPU: (accuracy, steps/s)."""
    import torch
    (xt, yt), (xv, yv) = train, test
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.AdamW(p.values(), lr=lr, weight_decay=wd)
    xt_, yt_ = torch.tensor(xt), torch.tensor(yt.astype(np.int64))
    fwd = lambda x: torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]  # noqa: E731
    batches = len(yt) // BATCH
    t0 = time.perf_counter()
    for i in range(steps):
        b = i % batches
        loss = torch.nn.functional.cross_entropy(fwd(xt_[b * BATCH:(b + 1) * BATCH]), yt_[b * BATCH:(b + 1) * BATCH])
        opt.zero_grad()
        loss.backward()
        opt.step()
    rate = steps / (time.perf_counter() - t0)
    with torch.no_grad():
        acc = float((fwd(torch.tensor(xv)).argmax(1).numpy() == yv).mean())
    return acc, rate


def main(argv=None):
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--plot", default="wgsl_mlp.png", help="where to save the loss curve ('' for none)")
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    train, test = digits()
    params = init_params()
    lr, wd = 3e-3, 1e-4
    opt = rlx_gpu.AdamW(params, lr=lr, weight_decay=wd, device=args.device)
    print(f"adapter: {opt.device.name} ({opt.device.info['backend']}, {opt.device.info['type']})")
    print(f"digits: {len(train[1])} training and {len(test[1])} test images; {args.steps} steps of {BATCH}")
    mlp = GpuMLP(opt, train, test)
    curve = []
    mlp.step(0)
    opt.device.sync()  # (pipelines compiled before the clock starts)
    t0 = time.perf_counter()
    for i in range(1, args.steps):
        mlp.step(i)
        if i % args.log_every == 0 or i == args.steps - 1:
            curve.append((i, mlp.batch_loss()))
            print(f"step {i:5d}  batch loss {curve[-1][1]:.4f}")
    opt.device.sync()
    rate = (args.steps - 1) / (time.perf_counter() - t0)
    acc = mlp.test_accuracy()
    print(f"rlx_gpu: test accuracy {acc:.4f}, {rate:.0f} steps/s (forward, backward and AdamW on the device)")
    try:
        tacc, trate = torch_run(params, train, test, args.steps, lr, wd)
        print(f"torch (CPU): test accuracy {tacc:.4f}, {trate:.0f} steps/s")
    except ImportError:
        print("torch is not installed: no comparison")
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(6, 3.5))
            ax.plot(*zip(*curve))
            ax.set(xlabel="step", ylabel="batch loss", yscale="log",
                   title=f"digits MLP in WGSL on {opt.device.name}: test accuracy {acc:.3f}")
            fig.tight_layout()
            fig.savefig(args.plot, dpi=110)
            print(f"saved {args.plot}")
        except ImportError:
            print("matplotlib is not installed: no plot")
    print(f"final loss {curve[-1][1]:.4f}, test accuracy {acc:.4f}")
    if args.steps >= 150:  # the goal (0.974 after 150 steps on llvmpipe, 0.987 after 1,500)
        assert acc >= 0.95, f"test accuracy {acc:.4f} < 0.95"
    return acc


if __name__ == "__main__":
    main()
