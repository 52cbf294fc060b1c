"""The user's own command as the workload: ``autotune [overrides] -- python train.py ARGS``.

Nothing of the training is restated here. Before the study, the command runs once as a
*discovery run* (until its second step): its ``autotune.Runtime`` calls pass the script's own
settings (``rt.loader_kwargs(batch_size=32, num_workers=2)``, ``rt.autocast()``, ...), and
the run writes them down with the knobs those calls reach (production/settings.py). They
become this workload's ``defaults`` (the study's baseline is the script's own configuration)
and its ``knob_limits`` (a knob no call reaches stays at the script's value, and the study
says which line would let it). Each trial then runs the command itself, in the trial's
process (measure/script_trial.py), and the script's meter steps are the trial's window.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from importlib import import_module
from pathlib import Path
from typing import Any

from autotune.core.env import DISCOVER_ENV, child_environ
from autotune.core.knobs import KNOBS
from autotune.core.workload import Workload, WorkloadError

#: A discovery run that has not reached its second step by then is said to hang.
DISCOVER_TIMEOUT_S = 300.0
#: The line that lets a study reach each knob, for a script whose calls do not.
LINES: dict[str, str] = {
    "batch_size": "pass **rt.loader_kwargs(batch_size=..., num_workers=...) to your DataLoader",
    "num_workers": "pass **rt.loader_kwargs(batch_size=..., num_workers=...) to your "
                   "DataLoader",
    "pin_memory": "pass **rt.loader_kwargs(...) to your DataLoader",
    "prefetch_factor": "pass **rt.loader_kwargs(...) to your DataLoader",
    "persistent_workers": "pass **rt.loader_kwargs(...) to your DataLoader",
    "non_blocking": "move each batch with inputs, targets = rt.to_device(inputs, targets)",
    "channels_last": "place the model with model = rt.model(model)",
    "amp": "run the forward and the loss under `with rt.autocast():`",
    "compile": "call the model through forward = rt.compile(model)",
    "optimizer_impl": "pass **rt.optimizer_kwargs() to your optimizer",
    "set_to_none": "clear gradients with rt.zero_grad(optimizer)",
}
#: A framework whose Trainer a script builds, found by its discovery run: its name in words
#: and the module of its hook and exports.
FRAMEWORKS = {"hf": ("Hugging Face Trainer", "autotune.adapters.hf.script"),
              "lightning": ("Lightning Trainer", "autotune.adapters.lightning.script")}
_found: dict[tuple[Any, ...], dict[str, Any]] = {}


class ScriptWorkload(Workload):
    """A study of the user's command as it is launched (see the module's docstring)."""

    # No ``verifier``: autotune verify runs the command itself, never a verifier module
    # (production/verify.py reads the study's command from its request).
    pads_batches = False
    pads_to_multiple = False

    def __init__(self, command: list[str], cwd: str | None = None, name: str | None = None):
        self.cwd = str(Path(cwd or os.getcwd()).resolve())
        self.command = check_command([str(a) for a in command], self.cwd)
        self.name = name or Path(script_of(self.command)).stem
        found = discover(self.command, self.cwd)
        reached = set(found["reached"])
        self.defaults = dict(found["own"])
        self.image_inputs = bool(found.get("image_inputs"))
        self.optimizer_name = str(found.get("optimizer") or "")
        #: "hf": the script's Trainer is tuned through its arguments (adapters/hf/script.py).
        self.framework: str | None = found.get("framework") or None
        self.knob_limits = {
            k.name: ([self.defaults.get(k.name, 32 if k.name == "batch_size" else k.off)],
                     self._unreached(k.name)) for k in KNOBS if k.name not in reached}
        # What a framework's Trainer can take of a knob it reaches (its adapter's limits).
        self.knob_limits.update({k: (list(values), why) for k, (values, why)
                                 in (found.get("limits") or {}).items() if k in reached})
        # What its model can take (a Hugging Face model's attention implementations).
        traits = found.get("traits") or {}
        self.attention_choices = tuple(traits.get("attention_choices") or ())
        self.attention_dropout = float(traits.get("attention_dropout") or 0.0)

    def _unreached(self, knob: str) -> str:
        if self.framework in FRAMEWORKS:
            return f"{FRAMEWORKS[self.framework][0]}'s arguments do not hold it"
        return (f"your script's calls do not reach it: {LINES[knob]}" if knob in LINES
                else "a script's trials do not set it")

    def describe(self) -> str:
        own = (f" (its {FRAMEWORKS[self.framework][0]}, tuned through its arguments)"
               if self.framework in FRAMEWORKS else "")
        return f"your command: {shlex.join(self.command)}{own}"

    @classmethod
    def framework_exports(cls, best: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """A script whose framework's Trainer was tuned: that framework's forms of the answer
        (the hook's module, by name: workloads sit below the adapters)."""
        framework = best.get("framework")
        if framework not in FRAMEWORKS:
            return {}
        exported: dict[str, dict[str, Any]] = import_module(FRAMEWORKS[framework][1]).exports(
            best)
        return exported

    def model(self) -> Any:
        raise WorkloadError("a script's model is built by the script itself, in its trials")

    def optimizer(self, params: Any, **impl: Any) -> Any:
        """The script's optimizer is its own; for the rules that ask (SGD's), its class as the
        discovery run saw it, over the given parameters."""
        import torch

        cls = getattr(torch.optim, self.optimizer_name, None)
        if cls is None:
            raise WorkloadError("the script's optimizer is built by the script itself")
        return cls(params, lr=0.1) if cls is torch.optim.SGD else cls(params)


def script_of(command: list[str]) -> str:
    """The script (or ``-m`` module) a ``python ...`` command runs."""
    args = command[1:]
    return args[1] if args[:1] == ["-m"] else args[0]


def check_command(command: list[str], cwd: str | None = None) -> list[str]:
    """A ``python train.py ARGS`` or ``python -m module ARGS`` command, or a WorkloadError that
    says what is wrong and what is valid."""
    if not command:
        raise WorkloadError("no command after `--`: give the training you launch, as "
                            "`autotune [overrides] -- python train.py ARGS...`")
    if command[0].endswith(".py"):
        command = ["python", *command]
    if not Path(command[0]).name.startswith("python"):
        raise WorkloadError(
            f"`{shlex.join(command)}`: autotune runs a Python training command "
            "(`python train.py ARGS...` or `python -m package.module ARGS...`); for torchrun, "
            "give the script and set launch.nproc_per_node")
    args = command[1:]
    if args[:1] == ["-m"]:
        if len(args) < 2:
            raise WorkloadError("`python -m` needs a module: `python -m package.train ARGS...`")
        return command
    if not args or args[0].startswith("-"):
        raise WorkloadError(f"`{shlex.join(command)}`: expected `python train.py ARGS...` "
                            "(interpreter options before the script are not supported)")
    here = cwd or os.getcwd()
    if not Path(here, args[0]).is_file():
        raise WorkloadError(f"`{shlex.join(command)}`: the script {args[0]} is not a file "
                            f"here ({here}); run autotune from where you launch it")
    return command


def discover(command: list[str], cwd: str) -> dict[str, Any]:
    """The script's own settings and the knobs its calls reach, from one run of it to its
    second step (cached per command, script file and its modification time)."""
    script = Path(cwd, script_of(command))
    key = (tuple(command), cwd, script.stat().st_mtime if script.is_file() else None)
    if key not in _found:
        _found[key] = _discovery_run(command, cwd)
    return _found[key]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _discovery_run(command: list[str], cwd: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="autotune-discover-") as tmp:
        out = Path(tmp, "found.json")
        # As one rank of a launch (torchrun's variables, a world of one): a script that
        # makes its own process group (env://) starts here as it does under the launcher.
        env = child_environ({DISCOVER_ENV: str(out), "RANK": "0", "LOCAL_RANK": "0",
                             "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
        try:
            # As a trial runs it: in-process, its frameworks hooked (a Trainer's arguments
            # are the settings of a script with no autotune line: adapters/hf/script.py).
            proc = subprocess.run([sys.executable, "-m", "autotune.measure.script_run",
                                   *command], cwd=cwd, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=DISCOVER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise WorkloadError(
                f"`{shlex.join(command)}` took its first two steps in no less than "
                f"{DISCOVER_TIMEOUT_S:.0f} s (it hangs, or never calls meter.step): autotune "
                "reads the script's own settings from its first steps") from None
        if out.exists():
            return dict(json.loads(out.read_text()))
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        if proc.returncode != 0:
            raise WorkloadError(
                f"`{shlex.join(command)}` failed before its second step (exit code "
                f"{proc.returncode}); nothing was tuned. Its output ended with:\n{tail}")
        raise WorkloadError(
            f"`{shlex.join(command)}` ended without reporting two steps to autotune's meter: "
            "a script is tuned through the Hugging Face or Lightning Trainer it trains with "
            "(read as it is), or through its autotune.Runtime calls. For a loop of your own, "
            "add rt = autotune.Runtime() before your DataLoader, meter = rt.meter(), and "
            "meter.step(batch_size) after each step (docs/guide/script.md)."
            + (f" Its output ended with:\n{tail}" if tail else ""))
