"""The numerics check: a configuration whose losses drift from the baseline's numerics is
refused with its deviation in best.yaml and the summary; the next finalist is exported."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.measure.protocol import TrialRequest
from autotune.measure.runner import run_window
from autotune.results.trials import ANSWERS, baseline_trial, chosen_trial
from autotune.search.checks.numerics import (
    DEFAULT_TOLERANCE,
    _check_one,
    check_tolerance,
    deviation,
    families,
    reference_knobs,
)
from autotune.search.checks.spread import NOISE_MULTIPLE, REFERENCE_SEEDS
from tests.conftest import TINY_ARGS, TINY_WINDOW, run_cli
from tests.workloads_augment import AugmentedJPEGs
from tests.workloads_diag import baseline_knobs, spec


def test_tolerance_is_the_loosest_family_changed() -> None:
    ref = {"amp": "off", "compile": "off", "cuda_graphs": False, "transfer_dtype": "float32",
           "tf32": False, "channels_last": False}
    assert families({**ref, "channels_last": True}, ref) == ["default"]
    assert families({**ref, "amp": "bf16", "compile": "default"}, ref) == ["amp", "compile"]
    assert families({**ref, "transfer_dtype": "uint8"}, ref) == ["device_transform"]
    assert check_tolerance({"amp": 0.1})["amp"] == 0.1
    assert check_tolerance({})["compile"] == DEFAULT_TOLERANCE["compile"]
    with pytest.raises(ValueError, match="valid keys: default, amp"):
        check_tolerance({"bf16": 0.1})
    with pytest.raises(ValueError, match="positive number"):
        check_tolerance({"amp": -1})
    assert deviation([1.0, 2.2], [1.0, 2.0]) == pytest.approx(0.1)
    assert math.isinf(deviation([], [1.0]))


def test_diverging_configuration_is_refused(tmp_path: Path) -> None:
    pins = ["knobs.num_workers=0", "knobs.batch_size=16", "knobs.amp=off",
            "knobs.optimizer_impl=default", "knobs.host_allocator=default", "knobs.set_to_none=true"]
    proc = run_cli(["workload._target_=tests.workloads_user.LayoutSensitive", "device=cpu",
                    "study.n_trials=3", "study.agent=false", "study.prune=false",
                    "study.confirm_runs=1", "study.confirm_top=2", "study.numerics_steps=4",
                    "study.name=num", *pins, *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "studies" / "num" / "best.yaml").read_text())
    checked = best["numerics"]["trials"]
    bad = [e for e in checked.values() if e["passed"] is False]
    assert bad, (checked, proc.stdout[-3000:])  # channels_last was a finalist, and refused
    assert all(e["max_rel_dev"] == pytest.approx(0.5, abs=0.05) for e in bad), bad
    assert all(min(e["deviations"]) > e["tolerance"] for e in bad), bad
    assert all("refused: its loss over the last 2 of 4 steps lies " in e["reason"] for e in bad)
    assert best["knobs"]["channels_last"] is False
    # The confirmation's re-runs picked the refused (fastest) one: the next finalist wins,
    # with its own confirmed figure.
    assert best["metrics"]["confirm_runs"] and best["best_trial"] in best["confirmation"]["finalists"]
    assert {int(n) for n, e in checked.items() if e["passed"] is False} <= set(
        best["confirmation"]["finalists"])
    # ... checked and passed, or your own configuration (the baseline, which needs no check:
    # here the only other finalist, trial 2, is the baseline's configuration measured again).
    assert best["best_trial"] == best["confirmation"]["baseline_trial"] or \
        checked[str(best["best_trial"])]["passed"] is True
    assert "numerics trial" in proc.stdout and "refused: its loss over the last" in proc.stdout
    # The outcome in words: what was refused, what it would have given, what was exported.
    assert "numerics: refused by the numerics check" in proc.stdout
    # Checked as soon as it led the rounds, and measured in no round after that one.
    study = optuna.load_study(study_name="num",
                              storage=f"sqlite:///{tmp_path / 'studies' / 'num' / 'study.db'}")
    conf = study.user_attrs["confirmation"]
    refused = {int(n): r for n, r in (conf.get("refused") or {}).items()}
    assert set(refused) == {int(n) for n, e in checked.items() if e["passed"] is False}, conf
    for n, after in refused.items():
        assert len([v for v in conf["runs"][str(n)] if v is not None]) <= after
        assert len(conf["runs"][str(conf["baseline_trial"])]) >= after
    assert "and the numerics check refused it: the rounds go on without it" in proc.stderr + \
        proc.stdout


def _losses(knobs: dict, spec: dict, out: Path) -> list[float]:
    res = run_window(TrialRequest(workload=spec, knobs=knobs, device="cpu", window=TINY_WINDOW,
                                  numerics_steps=4), out)
    assert res.ok, res.stderr_tail[-2000:]
    return res.losses


def test_random_augmentations_follow_the_workers_and_the_reference_takes_them(tmp_path: Path
                                                                            ) -> None:
    """The premise: one worker draws other crops than the training process, so losses differ
    by more than any tolerance with no arithmetic changed; the same workers give the same
    losses. The reference therefore takes the finalist's data path."""
    wl_spec = spec(AugmentedJPEGs, root=str(tmp_path / "jpegs"))
    base = baseline_knobs(AugmentedJPEGs(str(tmp_path / "jpegs")))
    assert base["num_workers"] == 0
    in_process = _losses(base, wl_spec, tmp_path / "a")
    assert _losses(base, wl_spec, tmp_path / "b") == in_process  # seeded: same crops again
    one_worker = {**base, "num_workers": 1}
    worker = _losses(one_worker, wl_spec, tmp_path / "c")
    assert _losses(one_worker, wl_spec, tmp_path / "d") == worker
    assert deviation(worker, in_process) > DEFAULT_TOLERANCE["default"]  # other crops, not numerics

    class Setup:  # what reference_knobs reads of a StudySetup
        class space:  # noqa: N801
            baseline = base

    finalist = {**one_worker, "channels_last": True, "batch_size": base["batch_size"]}
    ref = reference_knobs(Setup, finalist)  # type: ignore[arg-type]
    assert ref["num_workers"] == 1 and ref["channels_last"] is False
    assert families(finalist, ref) == ["default"]


def test_finalists_fed_the_same_batches_share_one_reference() -> None:
    """Prefetching, pinning, non-blocking copies and the host allocator change neither the
    samples nor the random draws: two finalists that differ only there are compared with one
    reference (its seeds run once); other workers draw other augmentations and get their own."""
    base = {"batch_size": 16, "num_workers": 0, "prefetch_factor": None,
            "persistent_workers": False, "pin_memory": False, "non_blocking": False,
            "host_allocator": "default", "amp": "off", "length_grouping": False}

    class Setup:  # what reference_knobs reads of a StudySetup
        class space:  # noqa: N801
            baseline = base

    one = {**base, "amp": "bf16", "num_workers": 2, "prefetch_factor": 2}
    other = {**one, "prefetch_factor": 8, "pin_memory": True, "non_blocking": True,
             "host_allocator": "retain", "batch_size": 16}
    ref = reference_knobs(Setup, one)  # type: ignore[arg-type]
    assert ref == reference_knobs(Setup, other)  # type: ignore[arg-type]
    assert ref["num_workers"] == 2 and ref["amp"] == "off" and ref["prefetch_factor"] is None
    assert reference_knobs(Setup, {**one, "num_workers": 1}) != ref  # type: ignore[arg-type]


def test_an_augmented_image_study_is_not_refused_for_worker_randomness(tmp_path: Path) -> None:
    """An ImageFolder pipeline with RandomResizedCrop + flip: finalists with DataLoader workers
    are compared with a reference fed by the same workers, and pass."""
    # One worker for every trial: whichever the confirmation exports (the numerics check runs
    # only what is exported), it is fed by a worker, and so is its reference.
    pins = ["knobs.num_workers=1", "knobs.batch_size=16", "knobs.amp=off",
            "knobs.host_allocator=default", "knobs.prefetch_factor=2",
            "knobs.persistent_workers=true"]
    proc = run_cli([f"workload._target_={AugmentedJPEGs.__module__}.AugmentedJPEGs",
                    f"+workload.root={tmp_path / 'jpegs'}", "device=cpu", "study.n_trials=5",
                    "study.prune=false", "study.confirm_runs=1", "study.confirm_top=5",
                    "study.numerics_steps=4", "study.name=aug", *pins, *TINY_ARGS], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "studies" / "aug" / "best.yaml").read_text())
    checked = best["numerics"]["trials"]
    exported = checked[str(best["best_trial"])]
    assert exported["reference_data_path"].get("num_workers") == 1, checked
    for e in checked.values():
        assert e["passed"] is True, e
        assert e["same_data"] is True and e["deviation"] <= e["tolerance"], e
    # Only what is exported was run: each answer's chosen trial (the user's own for the
    # same-training answer needs no check), no other finalist; every one passed, so none
    # was checked in place of a refused one.
    study = optuna.load_study(study_name="aug",
                              storage=f"sqlite:///{tmp_path}/studies/aug/study.db")
    base = baseline_trial(study)
    chosen = {t.number for answer in ANSWERS for t in [chosen_trial(study, answer)[0]]
              if t is not None and not (answer == "same" and base is not None
                                        and t.number == base.number)}
    assert {int(n) for n in checked} == chosen, (sorted(checked), chosen)
    others = set(best["confirmation"]["finalists"]) - chosen
    assert others, best["confirmation"]  # finalists there were and did not run


# -- the user's own spread ---------------------------------------------------------------------

def _setup(tmp_path: Path, target: str, **study: Any) -> Any:
    """A study's setup for a test workload, as the command line builds one (CPU)."""
    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, StudyConfig, WindowConfig

    cfg = Config(workload={"_target_": target}, device="cpu",
                 study=StudyConfig(out_dir=str(tmp_path / "studies"), agent=False, **study),
                 window=WindowConfig(**TINY_WINDOW))
    return build_setup(cfg, [])[0]


def _trial(number: int, knobs: dict[str, Any], value: float, source: str = "sampler") -> Any:
    from optuna.distributions import IntDistribution

    return optuna.trial.create_trial(
        params={"batch_size": knobs["batch_size"]},
        distributions={"batch_size": IntDistribution(1, 256)}, value=value,
        user_attrs={"knobs": knobs, "outcome": "ok", "peak_memory_gb": 0.3, "source": source,
                    "ceiling_noise": {"window": 0.01}, "optimizer": "SGD"},
        system_attrs={"constraints": [-1.0]})


@pytest.mark.slow  # trial subprocesses (the check's runs)
def test_a_chaotic_recipes_bf16_run_that_trains_like_yours_is_accepted(tmp_path: Path) -> None:
    """Step by step, the bf16 run of a recipe whose first steps are chaotic drifts more than
    the AMP tolerance from the fp32 run of the same seed (the check refused such runs before);
    over its last steps it lies within the spread of the user's own runs at other seeds."""
    from autotune.search.checks.references import reference

    setup = _setup(tmp_path, "tests.workloads_numerics.ChaoticConvNet", numerics_steps=16)
    base = setup.space.baseline
    bf16 = _trial(1, {**base, "amp": "bf16"}, 200.0)
    refs: dict[str, Any] = {}
    first = _check_one(setup, bf16, check_tolerance({}), refs, None)
    # Its tail within the one-seed bound of your run at its seed (~5% against 6.45%): passed
    # on that run alone.
    assert first["passed"] is True and first["one_seed"] is True, first
    assert first["max_rel_dev"] > DEFAULT_TOLERANCE["amp"], first  # chaotic step by step
    # And judged by your runs' spread, once it is in hand, it passes as well.
    reference(setup, reference_knobs(setup, dict(bf16.user_attrs["knobs"])), refs, None)
    entry = _check_one(setup, bf16, check_tolerance({}), refs, None)
    assert entry["passed"] is True and "one_seed" not in entry, entry
    assert entry["deviation"] <= entry["tolerance"] and entry["spread"] > 0.02, entry
    assert len(entry["reference"]["tails"]) == REFERENCE_SEEDS
    assert entry["tolerance"] == pytest.approx(
        max(DEFAULT_TOLERANCE["amp"], NOISE_MULTIPLE * entry["spread"]), abs=1e-5)


@pytest.mark.slow  # trial subprocesses (the check's runs)
def test_a_wrong_cast_is_refused_beyond_your_own_spread(tmp_path: Path) -> None:
    """bf16 rounds the offset logits away: the loss does not come down as yours does, at
    either seed; refused with the figures a user checks it by. A speed knob alone trains as
    your run at its seed does: it passes on that one run, your other seeds not run until a
    finalist needs their spread."""
    setup = _setup(tmp_path, "tests.workloads_numerics.WrongCast", numerics_steps=10)
    base = setup.space.baseline
    refs: dict[str, Any] = {}
    runs = setup.out_dir / "numerics"
    speed = _trial(2, {**base, "set_to_none": not base["set_to_none"]}, 110.0)
    first = _check_one(setup, speed, check_tolerance({}), refs, None)
    assert first["passed"] is True and first["one_seed"] is True, first
    assert first["deviation"] < 1e-3 and first["spread"] is None, first
    assert first["reference"]["seeds"] == [0], first
    # What the summary and the report say of it: decided on one run, no spread shown.
    from autotune.results.answers import check_figures
    from autotune.results.report_numerics import numerics_rows
    assert check_figures(first).startswith("tail loss 0.00% from your run at its seed (within "
                                           "3.28%, where no spread"), check_figures(first)
    row = numerics_rows({"trials": {"2": first}})[0]
    assert row[2].endswith("(seeds 0)") and row[3] == "not needed", row
    assert row[4] == "3.28% (one seed: within it no spread could refuse at 5%)", row
    assert sorted(p.name for p in runs.iterdir()) == ["reference-0-seed0",
                                                       f"trial-{speed.number}"]
    entry = _check_one(setup, _trial(1, {**base, "amp": "bf16"}, 300.0), check_tolerance({}),
                       refs, None)
    assert entry["passed"] is False, entry
    assert len(entry["deviations"]) == 2 and min(entry["deviations"]) > entry["tolerance"]
    assert entry["reason"].startswith("refused: its loss over the last 5 of 10 steps lies ")
    assert "at seeds 0, 1, 2" in entry["reason"] and "for amp" in entry["reason"]
    # The reference was completed, not run again: seed 0 once, then seeds 1 and 2.
    assert sorted(p.name for p in runs.iterdir() if p.name.startswith("reference")) == [
        "reference-0-seed0", "reference-0-seed1", "reference-0-seed2"]
    # With the spread in hand, the speed knob is judged by it: the run of your seed 0 again,
    # one of the runs the spread is made of (and the references are not run again).
    ok = _check_one(setup, speed, check_tolerance({}), refs, None)
    assert ok["passed"] is True and ok["deviation"] <= ok["spread"] + 1e-6, ok
    assert ok["max_rel_dev"] < 1e-3 and len(refs) == 1 and "one_seed" not in ok, ok


def test_a_pass_on_one_seed_is_a_pass_whatever_your_other_seeds_read() -> None:
    """spread.one_seed_bound: a finalist that close to your run at its seed passes the full
    verdict (within the tolerance of your runs' mean, 3x their spread and at least the floor)
    for any runs at the next seeds, so they need not be run; a little beyond it (away from
    zero), some runs there refuse it."""
    from itertools import product

    from autotune.search.checks.spread import Spread, one_seed_bound, passes_on_one_seed

    def passes(f: float, tails: tuple[float, ...], floor: float) -> bool:
        s = Spread(tails, tuple(range(len(tails))))
        return s.deviation([f]) <= s.tolerance(floor) + 1e-12

    others = [x / 200 for x in range(-120, 121)]  # the next seeds: -60% to +60% of yours
    for r0, floor in product((2.5, -1.7), (0.05, 0.10, 0.3)):
        bound = one_seed_bound(floor)
        assert 0 < bound < floor
        for side in (1, -1):
            f = r0 + side * bound * abs(r0)
            assert passes_on_one_seed([9.0, f], [9.0, r0], floor)
            for a, b in product(others, others):
                assert passes(f, (r0, r0 * (1 + a), r0 * (1 + b)), floor), (r0, floor, a, b)
            beyond = r0 + side * 1.05 * bound * abs(r0)
            assert not passes_on_one_seed([9.0, beyond], [9.0, r0], floor)
            if side * r0 < 0:  # toward zero the mean's floor can grow: the bound is tight away
                continue
            assert any(not passes(beyond, (r0, r0 * (1 + a), r0 * (1 + b)), floor)
                       for a, b in product(others, others)), (r0, floor, side)
    assert not passes_on_one_seed([float("nan")], [1.0], 0.1)
    assert not passes_on_one_seed([1.0], [float("inf")], 0.1)


@pytest.mark.slow  # trial subprocesses (the check's runs)
def test_a_diverging_reference_is_uninformative_not_a_refusal(tmp_path: Path) -> None:
    """Your own configuration's loss goes non-finite: its runs say nothing about another
    arithmetic, so the finalist is reported unchecked (and exported), not refused."""
    setup = _setup(tmp_path, "tests.workloads_faulty.NaNLoss", numerics_steps=4)
    base = setup.space.baseline
    entry = _check_one(setup, _trial(1, {**base, "set_to_none": not base["set_to_none"]}, 1.0),
                       check_tolerance({}), {}, None)
    assert entry["passed"] is None and entry["uninformative"] is True, entry
    assert "your own configuration's loss went non-finite at seed 0" in entry["reason"]
