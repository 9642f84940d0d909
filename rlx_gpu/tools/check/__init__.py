"""``rlx-gpu check-shaders``: validate WGSL files with naga (CLI and in-process, through wgpu) and Tint.

Each file is checked as the runtime compiles it: ``// #include`` lines resolved, and for the package's own
shaders the pipeline-overridable constants its optimizers use (WG, EPT) passed at pipeline creation (wgpu,
Tint) or written in as the overrides' defaults (naga CLI, which takes no constants). Diagnostics are mapped
back to the file and line they came from, including lines that arrived through an include.

Validators:
    naga-cli  the ``naga`` executable (PATH, or ``RLX_GPU_NAGA``): validate, then translate to SPIR-V, MSL,
              HLSL and GLSL so a shader that fails to translate for Metal or DX12 is caught anywhere.
    wgpu      naga inside wgpu-native: a shader module and a compute pipeline per entry point on the
              selected adapter (``--device`` or ``RLX_GPU_ADAPTER``).
    tint      Tint through Dawn's Null backend (``pip install rlx_gpu[check]``), no GPU needed.
Exit status: 0 nothing failed, 1 something failed, 2 bad usage.
"""
from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .cli import command, report, unchecked  # noqa: F401 (report, unchecked: public)
from .sources import Diagnostic, Source, collect, load, shipped  # noqa: F401 (load, shipped: public)

VALIDATORS = ("naga-cli", "wgpu", "tint")
NAGA_TARGETS = (("spv", "SPIR-V"), ("metal", "MSL"), ("hlsl", "HLSL"))
_CODESPAN = re.compile(r"┌─\s*(?:[^\s:]*):(\d+):(\d+)")   # naga: "┌─ wgsl:12:5" or "┌─ path/x.wgsl:12:5"
_TINT = re.compile(r"(?m)(?:^|\s)[^\s:]*:(\d+):(\d+)\s+error:\s*(.*)$")  # tint: ":12:5 error: message"
_OVERRIDE = re.compile(r"^(\s*override\s+(\w+)\s*:\s*(\w+)\s*=\s*)([^;]+)(;.*)$")


@dataclass
class Result:
    file: str
    validator: str
    status: str  # "pass", "fail" or "unavailable"
    diagnostics: list = field(default_factory=list)
    reason: str | None = None


def with_defaults(code: str, constants: dict) -> str:
    """The source with each override's default set to the runtime's constant (for tools that take none)."""
    lines = []
    for ln in code.split("\n"):
        m = _OVERRIDE.match(ln)
        if m and m.group(2) in constants:
            v = constants[m.group(2)]
            if m.group(3) == "bool":
                lit = "true" if v else "false"
            else:
                lit = f"{int(v)}u" if m.group(3) == "u32" else (f"{int(v)}i" if m.group(3) == "i32" else repr(float(v)))
            ln = m.group(1) + lit + m.group(5)
        lines.append(ln)
    return "\n".join(lines)


def _naga_message(text: str) -> str:
    """naga's diagnostic (codespan format, from the CLI or wgpu) as one line: error, caret label, notes."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    main = next((ln for ln in lines if re.search(r"(?i)\berror\b", ln) and ln.lower() != "validation error"
                 and not ln.lower().startswith(("caused by", "in wgpu"))), lines[0] if lines else "(no message)")
    extra = [m.group(1).strip() for m in re.finditer(r"(?m)^[\s│|]*\^+\s*(\S.*)$", text)]
    extra += [m.group(1).strip() for m in re.finditer(r"(?m)^\s*= (.+)$", text)]
    return "; ".join(dict.fromkeys([main.removeprefix("error: "), *extra]))


# -- naga CLI ------------------------------------------------------------------------------------------
def naga_executable() -> tuple[str | None, str | None]:
    exe = os.environ.get("RLX_GPU_NAGA")
    if exe:
        if shutil.which(exe) or (Path(exe).is_file() and os.access(exe, os.X_OK)):
            return (shutil.which(exe) or exe), None
        return None, f"RLX_GPU_NAGA={exe!r} is not an executable file"
    found = shutil.which("naga")
    if found:
        return found, None
    return None, "no `naga` executable on PATH (install it with `cargo install naga-cli`, or set RLX_GPU_NAGA)"


def check_naga_cli(sources: list, timeout: float) -> list:
    exe, why = naga_executable()
    if exe is None:
        return [Result(s.name, "naga-cli", "unavailable", reason=why) for s in sources]
    results = []
    with tempfile.TemporaryDirectory(prefix="rlx-gpu-naga-") as tmp:
        for s in sources:
            src = Path(tmp) / s.path.name
            src.write_text(with_defaults(s.code, s.constants))
            runs = [("validate", [str(src)])]
            runs += [(name, [str(src), str(src.with_suffix(f".{ext}"))]) for ext, name in NAGA_TARGETS]
            runs += [("GLSL", [str(src), str(Path(tmp) / f"{src.stem}.{e}.comp"), "--entry-point", e,
                               "--profile", "es310"]) for e in s.entries]
            diags = []
            for target, args in runs:
                try:
                    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)
                except subprocess.TimeoutExpired:
                    diags.append(s.locate(None, None, f"naga timed out after {timeout:g} s", target))
                    break
                except OSError as e:
                    diags.append(s.locate(None, None, f"could not run {exe}: {e}", target))
                    break
                if r.returncode != 0:
                    text = (r.stderr or "") + (r.stdout or "")
                    m = _CODESPAN.search(text)
                    line, col = (int(m.group(1)), int(m.group(2))) if m else (None, None)
                    diags.append(s.locate(line, col, _naga_message(text), None if target == "validate" else target))
                    if target == "validate":
                        break  # translations of an invalid module would only repeat the error
            results.append(Result(s.name, "naga-cli", "fail" if diags else "pass", diags))
    return results


# -- the in-process compilers (naga inside wgpu-native, Tint), each in a child process ---------------------------
def _job(s: Source) -> dict:
    return {"label": s.label, "code": s.code, "entries": s.entries, "constants": s.constants,
            "layouts": {e: s.layouts[e] for e in s.entries}}


def _diagnostics(validator: str, s: Source, errors: list) -> list:
    diags = []
    for text in errors:
        if validator == "tint":
            found = list(_TINT.finditer(text))
            if found:
                diags += [s.locate(int(m.group(1)), int(m.group(2)), m.group(3)) for m in found]
                continue
            diags.append(s.locate(None, None, text.strip().splitlines()[0] if text.strip() else text))
        else:
            m = _CODESPAN.search(text)
            diags.append(s.locate(int(m.group(1)) if m else None, int(m.group(2)) if m else None,
                                  _naga_message(text)))
    return diags


def _died(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {-rc}: {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


class _Child:
    """A validator child process fed ``job`` on its stdin, its stdout's lines (JSON messages) read by a thread."""

    def __init__(self, validator: str, err, job: dict):
        self.err = err
        self.proc = subprocess.Popen([sys.executable, "-m", "rlx_gpu.tools.check.validate", validator],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.proc.stdin.write(json.dumps(job))
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_message(self, limit):
        """The next message, None once the child's output ended, or "timeout"."""
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            return "timeout"
        return None if line is None else json.loads(line)

    def why_dead(self) -> str:
        self.proc.wait()
        self.err.seek(0)
        tail = [ln for ln in self.err.read().splitlines() if ln.strip()]
        return _died(self.proc.returncode) + (f"; it said: {tail[-1].strip()}" if tail else "")


def check_in_child(validator: str, sources: list, device_sel=None, timeout: float = 60.0) -> list:
    """``validator`` ("wgpu" or "tint") over ``sources`` in a child process (``rlx_gpu.tools.check.validate``). A crash or a
    hang on a file is a failure of that file with a message; a new child checks the files after it."""
    results, todo = {}, list(sources)
    while todo:
        with tempfile.TemporaryFile("w+") as err:
            child = _Child(validator, err, {"device": device_sel, "jobs": [_job(s) for s in todo]})
            try:
                todo = _run_child(child, validator, todo, results, timeout)
            finally:
                child.proc.kill()
                child.proc.wait()
    return [results[id(s)] for s in sources if id(s) in results]


def _run_child(child: _Child, validator: str, todo: list, results: dict, timeout: float) -> list:
    """One child's results into ``results``; the sources left for the next child (after a crash or a hang)."""
    first = child.next_message(max(timeout, 120.0))
    if not isinstance(first, dict) or "ready" not in first:
        child.proc.kill()
        why = first.get("unavailable") if isinstance(first, dict) else (
            "it did not start in time" if first == "timeout" else f"it could not start ({child.why_dead()})")
        for s in todo:
            results[id(s)] = Result(s.name, validator, "unavailable", reason=why)
        return []
    for k, s in enumerate(todo):
        msg = child.next_message(timeout)
        if isinstance(msg, dict):
            diags = _diagnostics(validator, s, msg["errors"])
            results[id(s)] = Result(s.name, validator, "fail" if diags else "pass", diags)
            continue
        if msg == "timeout":
            child.proc.kill()
            text = f"the {validator} validator did not finish this file in {timeout:g} s"
        else:
            text = f"the {validator} validator crashed on this file ({child.why_dead()})"
        results[id(s)] = Result(s.name, validator, "fail", [s.locate(None, None, text)])
        return todo[k + 1:]
    return []


def check_wgpu(sources: list, device_sel, timeout: float = 60.0) -> list:
    return check_in_child("wgpu", sources, device_sel, timeout)


def check_tint(sources: list, timeout: float = 60.0) -> list:
    import importlib.util
    if importlib.util.find_spec("wgpudawn") is None:
        why = "wgpudawn is not installed (pip install rlx_gpu[check], or pip install wgpudawn)"
        return [Result(s.name, "tint", "unavailable", reason=why) for s in sources]
    return check_in_child("tint", sources, None, timeout)


# -- the command ----------------------------------------------------------------------------------------
def run(paths, validators, device=None, timeout=60.0) -> list:
    sources, failed = collect(paths)
    results = [Result(str(p), v, "fail", [Diagnostic(str(p), None, None, msg)]) for p, msg in failed for v in validators]
    for v in validators:
        if v == "naga-cli":
            results += check_naga_cli(sources, timeout)
        elif v == "wgpu":
            results += check_wgpu(sources, device, timeout)
        elif v == "tint":
            results += check_tint(sources, timeout)
    return results


def main(argv=None) -> int:
    """``rlx-gpu check-shaders``: the command (``cli.command``) over these validators; its exit status."""
    return command(argv, VALIDATORS, run)
