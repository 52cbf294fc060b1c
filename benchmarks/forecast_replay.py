"""The statement at the search's end, replayed on kept studies: what this checkout's estimate
(search/console/estimate.py ``revised``) says of the confirmation and the numerics check from
each study's stored search, beside what the run stated then (its best.yaml) and measured.

``python -m benchmarks.forecast_replay DIR...``: each DIR is a ``--keep`` folder of
benchmarks/confirmation.py (``DIR/<study>-new-<run>/<study>-new-<run>/``). Nothing is run
again: the stored trials feed the same estimate a study calls as its search ends, so a change
to the forecast is read against the same searches, apart from the noise of new runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import optuna
import yaml

from autotune.search.console.estimate import revised
from benchmarks.confirmation import STUDIES, _setup


def replay(folder: Path, scratch: Path) -> str:
    """One table row: the study, measured, stated then and now (each phase and the total)."""
    setup = _setup(*STUDIES[folder.name.split("-")[0]], scratch)
    doc = yaml.safe_load((folder / "best.yaml").read_text())
    study = optuna.load_study(study_name=folder.name, storage=f"sqlite:///{folder / 'study.db'}")
    forecasts: list = []
    now = revised(setup, study, setup.study.confirm_runs, forecasts)
    wall = doc["study"]["wall"]
    ph = wall["phases"]
    then_conf, then_check = ph["confirmation"]["revised_s"], ph["numerics check"]["revised_s"]
    total_now = (wall["search_end_s"] - then_conf - then_check + now.get("confirmation", 0.0)
                 + now.get("numerics check", 0.0))
    measured = wall["measured_s"]

    def miss(stated: float) -> str:
        return f"{100 * (measured / stated - 1):+.0f}%"

    led = ", ".join(f"{'+'.join(map(str, sorted(w)))} {share:.2f}"
                    for w, share in sorted(forecasts[0].led, key=lambda x: -x[1])[:3]) \
        if forecasts else ""
    return (f"| {folder.parent.parent.name}/{folder.name} | {ph['confirmation']['measured_s']:.0f}"
            f" / {then_conf:.0f} / {now.get('confirmation', 0.0):.0f} | "
            f"{ph['numerics check']['measured_s']:.0f} / {then_check:.0f} / "
            f"{now.get('numerics check', 0.0):.0f} | {led} | {measured:.0f} | "
            f"{wall['search_end_s']:.0f} ({miss(wall['search_end_s'])}) | "
            f"{total_now:.0f} ({miss(total_now)}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    a = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    scratch = Path("/tmp/forecast_replay")
    scratch.mkdir(exist_ok=True)
    print("| study | confirmation s: measured / stated then / now | numerics check s: measured"
          " / then / now | who leads, now (top 3 shares) | measured s | stated then (miss) |"
          " stated now (miss) |\n|---|---|---|---|---|---|---|")
    for d in a.dirs:
        for folder in sorted(p / p.name for p in d.glob("*-new-*")):
            print(replay(folder, scratch))


if __name__ == "__main__":
    main()
