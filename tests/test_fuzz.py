"""Fuzzing the two inputs that arrive from outside: checkpoint files (byte-level mutations of real ones, and
structural mutations of their metadata) and state dicts (structural mutations). Every outcome is either a
ValueError (TypeError for a wrong Python type in a state dict) that names the file and changes nothing, or a
successful load: never another exception, never a half-applied load."""
import json
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlx_gpu
from helpers import snapshot

pytestmark = pytest.mark.gpu
# CI runs 120 examples per test from a fixed seed; RLX_GPU_FUZZ_EXAMPLES=5000 (and a random seed) for a long run
SETTINGS = settings(max_examples=int(os.environ.get("RLX_GPU_FUZZ_EXAMPLES", 120)),
                    derandomize="RLX_GPU_FUZZ_EXAMPLES" not in os.environ, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False)
                    | st.text(max_size=8), lambda kids: st.lists(kids, max_size=3)
                    | st.dictionaries(st.text(max_size=6), kids, max_size=3), max_leaves=8)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, device):
    folder = tmp_path_factory.mktemp("fuzz")
    opt = rlx_gpu.AdamW({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)},
                        lr_scale={"b": 0.5}, device=device)
    opt.step({"w": np.ones((2, 3), np.float32)})
    good = folder / "good.npz"
    opt.save(good)
    return folder, opt, good.read_bytes()


def fingerprint(opt):
    """helpers.snapshot, and the hyperparameters and lr_scale a failed load might have changed."""
    return snapshot(opt), json.dumps(opt.state_dict()["param_groups"], default=str), dict(opt.lr_scale)


def attempt(opt, path, before):
    """restore() and the class loaders: ValueError naming the file and nothing changed, or success."""
    try:
        opt.restore(path)
    except ValueError as e:
        assert str(path) in str(e), str(e)
        assert fingerprint(opt) == before
    else:
        opt.restore(path.parent / "good.npz")  # back to the baseline for the next example
    for load in (lambda: rlx_gpu.Optimizer.load(path, device=opt.device), lambda: rlx_gpu.reference.AdamW.load(path)):
        try:
            load()
        except ValueError as e:
            assert str(path) in str(e), str(e)


@SETTINGS
@given(st.data())
def test_byte_mutations_of_a_real_checkpoint(setup, data):
    folder, opt, good = setup
    before = fingerprint(opt)
    raw = bytearray(good)
    kind = data.draw(st.sampled_from(["flip", "truncate", "splice", "zero"]))
    if kind == "truncate":
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 6))):
            i = data.draw(st.integers(0, len(raw) - 1))
            if kind == "flip":
                raw[i] ^= 1 << data.draw(st.integers(0, 7))
            elif kind == "zero":
                raw[i] = 0
            else:
                raw[i:i] = data.draw(st.binary(min_size=1, max_size=8))
    path = folder / "mutated.npz"
    path.write_bytes(bytes(raw))
    attempt(opt, path, before)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@SETTINGS
@given(st.data())
def test_structural_mutations_of_the_metadata(setup, data):
    folder, opt, good = setup
    before = fingerprint(opt)
    z = dict(np.load(folder / "good.npz"))
    meta = json.loads(bytes(z.pop("__meta__")))
    where = data.draw(st.sampled_from([p for p in _paths(meta) if p]))
    target = meta
    for k in where[:-1]:
        target = target[k]
    if data.draw(st.booleans()):
        target[where[-1]] = data.draw(JSON)
    else:
        del target[where[-1]]
    z["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    if data.draw(st.booleans()):  # and sometimes a member of another dtype or shape
        victim = data.draw(st.sampled_from(sorted(z)))
        z[victim] = data.draw(st.sampled_from([np.zeros(3), np.zeros((3, 2), np.float32), np.array("x"),
                                                np.zeros(0, np.float32), np.zeros((2, 3), np.int64)]))
    path = folder / "structural.npz"
    np.savez(path, **z)
    attempt(opt, path, before)


@SETTINGS
@given(st.data())
def test_structural_mutations_of_state_dicts(setup, data):
    folder, opt, _ = setup
    before = fingerprint(opt)
    sd = opt.state_dict()
    where = data.draw(st.sampled_from([p for p in _paths(sd) if p]))
    target = sd
    for k in where[:-1]:
        target = target[k]
    choice = data.draw(st.sampled_from(["json", "array", "delete"]))
    if choice == "delete":
        del target[where[-1]]
    elif choice == "array":
        target[where[-1]] = data.draw(st.sampled_from([np.zeros(3), np.zeros((2, 3), np.float32),
                                                        np.array(["a"]), np.zeros(1, np.int8), np.float32(2)]))
    else:
        target[where[-1]] = data.draw(JSON)
    try:
        opt.load_state_dict(sd)
    except (ValueError, TypeError) as e:
        assert re.match(r"AdamW\.load_state_dict: |Invalid |AdamW", str(e)), str(e)
        assert fingerprint(opt) == before
    else:
        opt.restore(folder / "good.npz")  # back to the baseline for the next example
