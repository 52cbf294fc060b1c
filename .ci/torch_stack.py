"""Link torch and what it requires, from the venv running this, into one folder of symlinks.

The wheel check (.ci/wheel_check) installs the built wheel into a fresh venv. torch's CUDA build
and its NVIDIA libraries are about 5.3 GB; a second copy of them checks nothing about autotune's
own packaging (the README's install already resolved the same ``torch`` requirement) and has
run a CI machine out of disk. The fresh venv sees this folder through a ``.pth`` file, so pip
finds torch installed and installs everything else the wheel declares, fresh.

Usage: python torch_stack.py FOLDER   (prints the distributions linked, one a line)
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path

from packaging.requirements import Requirement


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str) -> dict[str, md.Distribution]:
    """``root`` and every installed distribution it requires, extras followed (torch asks for
    ``cuda-toolkit[cublas,...]``) and markers evaluated here."""
    installed = {_key(d.metadata["Name"]): d for d in md.distributions()}
    found: dict[str, md.Distribution] = {}
    seen: set[tuple[str, str]] = set()
    todo = [(_key(root), "")]
    while todo:
        key, extra = todo.pop()
        if (key, extra) in seen or key not in installed:
            continue
        seen.add((key, extra))
        found[key] = installed[key]
        for line in installed[key].requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(_key(req.name), e) for e in ["", *sorted(req.extras)]]
    return found


def link(dists: dict[str, md.Distribution], folder: Path) -> None:
    """Symlink each distribution's top-level entries in site-packages (and its metadata)."""
    for dist in dists.values():
        site = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in sorted(tops - {".."}):  # ".." entries are console scripts in bin/
            target = folder / top
            if not target.exists() and (site / top).exists():
                target.symlink_to(site / top)


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    stack = closure("torch")
    link(stack, out)
    print("\n".join(sorted(stack)))
