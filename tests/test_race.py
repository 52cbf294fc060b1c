"""The search races its finalists (search/loop/race.py): after a trial that lands among them, one
round of the finalists and the baseline; a finalist shown slower is dropped before the search
ends; the confirmation starts from those rounds and only tops them up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.core.console import DETAIL
from autotune.measure.protocol import WindowResult
from autotune.results.intervals import Interval
from autotune.search.confirmation.choose import Candidate
from autotune.search.confirmation.confirm import confirm, eliminate
from autotune.search.confirmation.rounds import Rounds, raced
from autotune.search.confirmation.selection import Selection
from autotune.search.loop.race import race_round
from tests.conftest import TINY_ARGS, run_cli

#: Each configuration's figure in every confirmation window: batch 64 is well behind the two
#: others, though its one search window read close to them (195).
FIGURES = {"base": 100.0, "b128": 210.0, "b64": 150.0, "b96": 205.0}


def _setup(tmp_path: Path, **study: Any) -> Any:
    """A real StudySetup (build_setup) of the MLP workload; the race on unless said."""
    study.setdefault("race", True)
    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, StudyConfig, WindowConfig
    from tests.conftest import TINY_WINDOW

    cfg = Config(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"}, device="cpu",
                 study=StudyConfig(out_dir=str(tmp_path / "studies"), agent=False, **study),
                 window=WindowConfig(**TINY_WINDOW))
    return build_setup(cfg, [])[0]


def _knobs(setup: Any) -> dict[str, dict[str, Any]]:
    base = setup.space.baseline
    four = {"channels_last": True, "amp": "bf16", "host_allocator": "retain"}
    return {"base": base, "b128": {**base, **four, "batch_size": 128},
            "b64": {**base, **four, "batch_size": 64}, "b96": {**base, **four, "batch_size": 96}}


def _tell(study: optuna.Study, name: str, knobs: dict[str, Any], value: float | None,
          quiet: bool = True) -> optuna.trial.FrozenTrial:
    """A trial as the search tells it: its knobs, its window's wall time and noise."""
    from optuna.distributions import IntDistribution
    study.add_trial(optuna.trial.create_trial(
        params={"batch_size": knobs["batch_size"]},
        distributions={"batch_size": IntDistribution(1, 256)}, value=value,
        state=optuna.trial.TrialState.COMPLETE if value is not None
        else optuna.trial.TrialState.PRUNED,
        user_attrs={"knobs": knobs, "outcome": "ok" if value else "pruned",
                    "peak_memory_gb": 1.0, "wall_s": 4.0,
                    "source": "baseline" if name == "base" else "search",
                    "ceiling_noise": {"window": 0.005 if quiet else 0.08}},
        system_attrs={"constraints": [-1.0]}))
    return study.trials[-1]


def _serve(names: dict[str, str], seen: list[tuple[int, str]]) -> Any:
    """Each window's figure, planted, a little noise alternating by round."""
    def run(req: Any, trial_dir: Path, **_: Any) -> WindowResult:
        i = int(trial_dir.name.split("-")[0])
        name = names[json.dumps(req.knobs, sort_keys=True)]
        seen.append((i, name))
        wiggle = 1.002 if (i + len(name)) % 2 else 0.998
        return WindowResult(outcome="ok", samples_per_sec=FIGURES[name] * wiggle, steps=10,
                            wall_s=1.0)
    return run


def test_the_search_races_its_finalists_and_the_confirmation_only_tops_up(
        tmp_path: Path, caplog: Any) -> None:
    setup = _setup(tmp_path, confirm_top=3, confirm_budget_s=300, race=True)
    assert setup.study.race
    knobs = _knobs(setup)
    names = {json.dumps(k, sort_keys=True): n for n, k in knobs.items()}
    study = optuna.create_study(direction="maximize")
    seen: list[tuple[int, str]] = []
    run = _serve(names, seen)
    number: dict[str, int] = {}
    with caplog.at_level(DETAIL, logger="autotune"):
        for name, value in (("base", 100.0), ("b64", 195.0), ("b128", 210.0)):
            t = _tell(study, name, knobs[name], value)
            number[name] = t.number
            race_round(setup, study, t, run=run)
        # The baseline gets no round of its own; batch 64 and 128 raced from their trials on.
        rounds, dropped = raced(study)
        assert [sorted(o) for o in rounds.order] == [
            sorted([number["b64"], number["base"]]),
            sorted([number["b64"], number["b128"], number["base"]])]
        # A pruned trial, and one whose window read further than FINALIST_BAND behind the
        # best (a finalist by rank, but not one that could win), get no round.
        pruned = _tell(study, "b96", {**knobs["b96"], "cpu_threads": 1}, None)
        assert not race_round(setup, study, pruned, run=run)
        slow = _tell(study, "b96", {**knobs["b96"], "cpu_threads": 2}, 170.0)
        assert not race_round(setup, study, slow, run=run)
        # Rounds go on after each finalist's trial: batch 64, behind batch 128 once the pair
        # has its first stage (3 quiet rounds, as its windows are quiet), is dropped before the
        # search ends.
        for _ in range(2):
            assert race_round(setup, study, study.trials[number["b128"]], run=run)
        rounds, dropped = raced(study)
        assert dropped == {number["b64"]}, (rounds, dropped)
        assert "dropped trial(s)" in caplog.text
        # A finalist found late joins: the rounds before it are None, every list aligned.
        t = _tell(study, "b96", knobs["b96"], 205.0)
        number["b96"] = t.number
        assert race_round(setup, study, t, run=run)
        rounds, dropped = raced(study)
        assert rounds.runs[number["b96"]][:-1] == [None] * (len(rounds.order) - 1)
        assert number["b64"] not in rounds.order[-1]  # dropped: no longer measured
        assert {len(v) for v in rounds.runs.values()} == {len(rounds.order)}
    raced_rounds = len(rounds.order)

    seen.clear()
    record = confirm(setup, study, 3, 3, run=run)
    assert record is not None and record["stopped"] == "decided", record
    assert record["race"] == {"rounds": raced_rounds, "spent_s": float(sum(rounds.seconds)),
                              "dropped": [number["b64"]]}
    # The confirmation measured only what was missing: never the dropped finalist, and fewer
    # rounds than it needs from nothing (3, the first stage of quiet windows).
    assert "b64" not in {name for _, name in seen}
    assert record["rounds"] - raced_rounds < 3
    assert number["b64"] in record["dropped"]
    assert record["best_trial"] == number["b128"]
    iv = record["intervals"][str(number["b128"])]
    # Raced from its trial on (the race's first round was batch 64's): its interval counts
    # every round since, the race's included.
    assert iv["rounds"] == record["rounds"] - 1 > record["rounds"] - raced_rounds


def test_the_race_fixes_k_at_the_most_finalists_the_confirmation_can_hold(
        tmp_path: Path) -> None:
    """KN's k is fixed before the first round: the race's Bonferroni level alpha/(k-1) counts
    the most finalists the confirmation can hold (2 x confirm_top, and 2 same-training
    candidates), not the contenders left, so it does not grow towards alpha as they drop."""
    from autotune.results.record import study_attrs

    setup = _setup(tmp_path, confirm_top=3, confirm_budget_s=300, race=True)
    knobs = _knobs(setup)
    names = {json.dumps(k, sort_keys=True): n for n, k in knobs.items()}
    study = optuna.create_study(direction="maximize")
    run = _serve(names, [])
    systems = []
    for name, value in (("base", 100.0), ("b64", 195.0), ("b128", 210.0), ("b128", 0.0),
                        ("b128", 0.0)):
        t = study.trials[-1] if not value else _tell(study, name, knobs[name], value)
        if race_round(setup, study, t, run=run):
            systems.append(study_attrs(study)["race"]["selection"]["systems"])
    assert raced(study)[1], "batch 64 was to be dropped"  # one contender left after the drop
    assert systems == [8] * len(systems) and len(systems) >= 3


def test_the_race_keeps_to_its_share_of_the_confirmation_budget(tmp_path: Path,
                                                              caplog: Any) -> None:
    """Rounds during the search spend the confirmation's budget: at most RACE_BUDGET_SHARE of
    it, then the confirmation takes over; the confirmation's budget counts them."""
    setup = _setup(tmp_path, confirm_top=3, confirm_budget_s=18)  # a round ~8 s (4 s windows)
    knobs = _knobs(setup)
    names = {json.dumps(k, sort_keys=True): n for n, k in knobs.items()}
    study = optuna.create_study(direction="maximize")
    run = _serve(names, [])
    _tell(study, "base", knobs["base"], 100.0)
    t = _tell(study, "b128", knobs["b128"], 210.0)
    assert race_round(setup, study, t, run=run)  # 2 s of served windows
    with caplog.at_level(DETAIL, logger="autotune"):
        assert not race_round(setup, study, t, run=run)  # 2 s + ~8 s > 9 s
    assert "the confirmation takes it from here" in caplog.text
    record = confirm(setup, study, 3, 3, run=run)
    # The least 3 rounds, the race's one counted; its seconds in what the rounds spent.
    assert record is not None and record["rounds"] == 3, record
    assert record["race"]["spent_s"] == 2.0 and record["spent_s"] == 6.0


def test_the_race_does_not_spend_its_share_on_the_first_trials(tmp_path: Path,
                                                                caplog: Any) -> None:
    """By the end of trial k of n the race may have spent k/n of its share: the first close
    finalists of a 12-trial search, which later trials tend to displace, wait for rounds."""
    setup = _setup(tmp_path, confirm_top=3, confirm_budget_s=60)  # a share of 30 s
    knobs = _knobs(setup)
    names = {json.dumps(k, sort_keys=True): n for n, k in knobs.items()}
    study = optuna.create_study(direction="maximize")
    run = _serve(names, [])
    _tell(study, "base", knobs["base"], 100.0)
    b64 = _tell(study, "b64", knobs["b64"], 195.0)  # a round: ~8 s (two 4 s windows)
    with caplog.at_level(DETAIL, logger="autotune"):
        assert not race_round(setup, study, b64, run=run, progress=2 / 12)  # 5 s allowed
    assert "no round after trial 1 yet" in caplog.text
    assert "race" not in study.user_attrs
    assert race_round(setup, study, b64, run=run, progress=4 / 12)  # 10 s allowed
    b128 = _tell(study, "b128", knobs["b128"], 210.0)  # 2 s spent, a round now ~12 s
    assert not race_round(setup, study, b128, run=run, progress=5 / 12)  # 12.5 s allowed
    assert race_round(setup, study, b128, run=run, progress=6 / 12)  # 15 s allowed
    rounds, _ = raced(study)
    assert len(rounds.order) == 2


def test_finalists_the_race_never_measured_get_their_rounds_in_the_confirmation(
        tmp_path: Path) -> None:
    """The race measured batch 64, which batch 128 then displaced from the one finalist's
    place before any round of its own: the confirmation measures batch 128 from scratch, its
    least rounds counted in its own rounds, not the race's."""
    setup = _setup(tmp_path, confirm_top=1, confirm_budget_s=300)
    knobs = _knobs(setup)
    names = {json.dumps(k, sort_keys=True): n for n, k in knobs.items()}
    study = optuna.create_study(direction="maximize")
    seen: list[tuple[int, str]] = []
    _tell(study, "base", knobs["base"], 100.0)
    assert race_round(setup, study, _tell(study, "b64", knobs["b64"], 150.0),
                      run=_serve(names, seen))
    b128 = _tell(study, "b128", knobs["b128"], 210.0)  # no round after it
    record = confirm(setup, study, 3, 1, run=_serve(names, seen))
    assert record is not None and record["best_trial"] == b128.number, record
    assert record["race"]["rounds"] == 1 and record["rounds"] >= 4
    assert record["intervals"][str(b128.number)]["rounds"] == record["rounds"] - 1 >= 3


def test_no_race_when_it_is_off_or_there_is_no_confirmation(tmp_path: Path) -> None:
    for study_cfg in ({"race": False}, {"confirm_runs": 0}):
        setup = _setup(tmp_path, **study_cfg)
        knobs = _knobs(setup)
        study = optuna.create_study(direction="maximize")
        _tell(study, "base", knobs["base"], 100.0)
        t = _tell(study, "b128", knobs["b128"], 210.0)
        assert not race_round(setup, study, t, run=_serve({}, []))
        assert "race" not in study.user_attrs


def test_rounds_round_trip_and_a_late_contender_is_not_dropped_before_its_floor() -> None:
    rounds = Rounds([0, 1])
    for r in range(2):
        rounds.runs[0].append(100.0)
        rounds.runs[1].append(200.0 + r)
        rounds.contended[0].append(False)
        rounds.contended[1].append(r == 1)
        rounds.order.append([1, 0])
        rounds.seconds.append(2.0)
    rounds.join(2)
    rounds.runs[2].append(150.0)
    rounds.contended[2].append(False)
    rounds.runs[0].append(100.0)
    rounds.contended[0].append(False)
    rounds.order.append([2, 0])
    rounds.seconds.append(2.0)
    rounds.sat_out()  # trial 1 sat this one out
    assert rounds.runs[1][-1] is None and rounds.runs[2][:2] == [None, None]
    back = Rounds.from_dict(json.loads(json.dumps(rounds.as_dict())))
    assert back.runs == rounds.runs and back.contended == rounds.contended
    assert back.order == rounds.order and back.seconds == rounds.seconds
    assert back.paired(1, 0) == 2 and back.paired(2, 0) == 1
    assert back.only({0, 2}).order == [[0], [0], [2, 0]]

    # Six rounds of two contenders 25% apart, and one that joined for the last round only.
    six = tuple(200.0 * (1 + 0.01 * (i % 2)) for i in range(6))
    lead = Candidate(1, Interval(2.0, 1.9, 2.1, 6), 3, 1.0, six)
    behind = Candidate(2, Interval(1.5, 1.4, 1.6, 6), 3, 1.0, tuple(0.75 * v for v in six))
    late = Candidate(3, Interval(1.2, 0.0, float("inf"), 1), 3, 1.0, (None,) * 5 + (240.0,))
    quiet = Selection(0.05, 0.95, 3, 0.01)  # windows 1% noisy: a first stage of 3 rounds
    assert [c.number for c in eliminate([lead, behind, late], (), quiet)] == [1, 3]
    # Before the first stage's quiet rounds nobody is dropped, however far behind: unknown
    # window noise asks for 6, and rounds beside other work do not count.
    early = [Candidate(c.number, c.interval, 3, 1.0, c.runs[:5]) for c in (lead, behind)]
    assert len(eliminate(early, (), Selection(0.05, 0.95, 3))) == 2
    busy = [Candidate(c.number, c.interval, 3, 1.0, c.runs, (True, True, True, True, False, False))
            for c in (lead, behind)]
    assert len(eliminate(busy, (), quiet)) == 2


@pytest.mark.slow
def test_a_real_study_races_and_its_confirmation_starts_from_the_rounds(tmp_path: Path) -> None:
    """Through the command line: the race's rounds are in the study and in the confirmation's
    record, and its windows are real (confirm/<round>-<trial>). By default a study races
    nothing (study.race=false: every round after the search)."""
    common = [*TINY_ARGS, "study.n_trials=3", "study.agent=false", "study.prune=false",
              "study.numerics_steps=0"]
    # Exit 4: the machine was too busy to rank them (the subject here is where rounds run).
    out = run_cli([*common, "study.name=raced", "study.confirm_budget_s=30", "study.race=true"],
                  tmp_path)
    assert out.returncode in (0, 4), out.stderr[-3000:]
    study = optuna.load_study(study_name="raced",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'raced' / 'study.db'}")
    race = study.user_attrs.get("race")
    assert race and race["order"], out.stdout[-3000:]
    conf = study.user_attrs["confirmation"]
    assert conf["race"]["rounds"] == len(race["order"]) and conf["rounds"] >= len(race["order"])
    assert "race round 1" in out.stdout and "from the search's race" in out.stdout
    assert f"{len(race['order'])} of them during the search" in out.stdout  # the summary
    best = yaml.safe_load((tmp_path / "studies" / "raced" / "best.yaml").read_text())
    assert best["confirmation"]["race"] == conf["race"]
    # The race's rounds are the confirmation's time in the summary, as the estimate counts them.
    wall = study.user_attrs["wall"]
    assert wall["phases"]["confirmation"]["race_s"] == round(sum(race["seconds"]), 1)
    assert "of it raced during the search" in wall["words"]
    assert (tmp_path / "studies" / "raced" / "confirm" / f"0-{race['order'][0][0]}").is_dir()
    # study.race=false is the default; a study so (tests/test_confirm.py's rounds) races nothing.
    from autotune.cli.config import StudyConfig

    assert StudyConfig().race is False


def test_the_estimate_counts_the_race_rounds_each_finalist_has(tmp_path: Path) -> None:
    """The least rounds left after the race are those of the finalist with the fewest: one
    the race never measured needs all of them (counting the race's rounds for every finalist
    ran a budgeted study 17% past its budget)."""
    from autotune.search.console.estimate import _raced_least, revised

    setup = _setup(tmp_path, confirm_top=3, confirm_budget_s=300)
    knobs = _knobs(setup)
    names = {json.dumps(k, sort_keys=True): n for n, k in knobs.items()}
    study = optuna.create_study(direction="maximize")
    run = _serve(names, [])
    base = _tell(study, "base", knobs["base"], 100.0)
    b128 = _tell(study, "b128", knobs["b128"], 210.0)
    for _ in range(3):
        assert race_round(setup, study, b128, run=run)
    rounds, _ = raced(study)
    assert _raced_least(rounds, [b128], base) == 3
    before = revised(setup, study, 3)["confirmation"]
    b96 = _tell(study, "b96", knobs["b96"], 205.0)  # found late: no round yet
    assert _raced_least(rounds, [b128, b96], base) == 0
    # Its three least rounds are in the estimate again (3 rounds of ~12 s: 4 s windows).
    assert revised(setup, study, 3)["confirmation"] >= 3 * 12.0 > before


def test_the_race_allowance_follows_the_search_in_trials_or_under_a_budget_in_time(
        tmp_path: Path) -> None:
    """Under study.time_budget_s the search stops when its time is spent, not at its last
    trial: its progress is the larger of the trials' share and the time's."""
    import dataclasses
    import time

    from autotune.search.loop.budget import search_progress

    setup = _setup(tmp_path)
    assert search_progress(setup, 3, 12) == 0.25
    assert search_progress(setup, 13, 12) == 1.0
    budgeted = _setup(tmp_path, time_budget_s=300.0)
    # 100 s of the budget gone: half of its search's 200 s (two thirds of it).
    budgeted = dataclasses.replace(budgeted, deadline=time.monotonic() + 200.0)
    assert search_progress(budgeted, 1, 12) == pytest.approx(0.5, abs=0.01)
    assert search_progress(budgeted, 9, 12) == 0.75


def test_the_search_times_its_trials_without_the_race_rounds_after_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under study.time_budget_s the search stops when the next trial and what follows would
    not fit: the next trial is timed from the trials alone, the race's rounds being the
    confirmation's time (timed with them, a budgeted study stopped with a fifth unspent)."""
    import time

    import autotune.search.loop.driver as driver_mod
    from autotune.search.loop.budget import with_deadline

    setup = with_deadline(_setup(tmp_path, time_budget_s=600.0))
    seen: list[list[float]] = []

    def stop_after_two(_setup: Any, _study: Any, trial_s: list[float]) -> str | None:
        seen.append(list(trial_s))
        return "two trials" if len(trial_s) >= 2 else None

    monkeypatch.setattr(driver_mod, "search_stop", stop_after_two)
    monkeypatch.setattr(driver_mod, "race_round", lambda *a, **k: time.sleep(1.0) or True)
    driver = driver_mod.Driver(setup, study=optuna.create_study(direction="maximize"))
    monkeypatch.setattr(driver, "before_ask", lambda: None)
    monkeypatch.setattr(driver, "run_one", lambda stop: time.sleep(0.05))
    assert driver.run(5) == 2
    assert len(seen[-1]) == 2 and max(seen[-1]) < 0.9, seen
