"""A study that could not measure says so: its confirmation ended on its budget while most
windows were contended (or noisy), so best.yaml, the summary and the report name the load,
export the user's own configuration instead of a speedup the intervals do not support, and the
exit code says it. A quiet study with the same figures says nothing of the kind."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution

from autotune.results.export import best_document
from autotune.results.intervals import paired_speedup
from autotune.results.record import set_study_attrs
from autotune.results.report_data import gather
from autotune.results.report_html import markdown
from autotune.results.trust import could_not_measure
from autotune.search.confirmation.choose import candidates_of, decide, still_racing
from autotune.search.confirmation.rounds import load_summary
from autotune.search.console.summary import confirmation_lines

BUSY = {"contended": True, "cpus": 2, "other_cpu_cores": 1.0, "runqueue_wait_share": 0.4,
        "reasons": ["other processes used 1.0 of 2 cores and the trial waited for a CPU 40% "
                    "of the time it wanted one"]}
QUIET = {"contended": False, "cpus": 2, "other_cpu_cores": 0.02, "runqueue_wait_share": 0.01}


WIDE = [130.0, 95.0, 120.0, 85.0]  # trial 1 over 4 rounds: an interval that includes 1.0
NARROW = [103.0, 101.0, 104.0, 102.0]  # +-2%: known, and not above 1.0 by much


def _study(load: dict[str, Any], stopped: str, noise: float, runs1: list[float] = WIDE,
           contended: dict[str, list[bool]] | None = None) -> optuna.Study:
    """A stored study: the baseline (trial 0) and one faster-looking trial, both measured under
    ``load``, and a confirmation of 4 rounds (trial 1's figures ``runs1``, the baseline's 100)."""
    study = optuna.create_study(direction="maximize")
    dist = {"amp": CategoricalDistribution(["off", "bf16"])}
    for n, (amp, value) in enumerate((("off", 100.0), ("bf16", 130.0))):
        study.add_trial(optuna.trial.create_trial(
            params={"amp": amp}, distributions=dist, value=value,
            user_attrs={"knobs": {"amp": amp}, "outcome": "ok", "samples_per_sec": value,
                        "source": "baseline" if n == 0 else "sampler",
                        "peak_memory_gb": 1.0, "contention": load},
            system_attrs={"constraints": [-1.0]}))
    runs = {"1": list(runs1), "0": [100.0, 100.0, 100.0, 100.0]}
    iv = paired_speedup(runs["1"], runs["0"])
    record: dict[str, Any] = {
        "method": "randomized interleaved rounds", "finalists": [1], "baseline_trial": 0,
        "rounds": 4, "order": [[0, 1]] * 4, "runs": runs,
        "contended": contended or {n: [load["contended"]] * 4 for n in runs},
        "intervals": {"1": {**iv.as_dict(), "changed": 1, "peak_memory_gb": 1.0}},
        "dropped": [], "stopped": stopped, "precision": 0.05, "budget_s": 300.0,
        "spent_s": 310.0, "window_noise": noise, "load": load_summary([load] * 8),
        "loads": [load] * 8, "failures": []}
    set_study_attrs(study, {"confirmation": decide(record, still_racing(candidates_of(record)),
                                                   0.05)})
    set_study_attrs(study, {"device": {"device": "cpu", "device_name": "test"}})
    return study


def test_a_busy_study_names_the_load_and_keeps_the_users_configuration() -> None:
    study = _study(BUSY, "budget", noise=0.15)
    said = could_not_measure(study)
    assert said is not None
    assert "too busy to measure" in said
    assert "other processes used 1.0 of 2 cores during 10 of 10 windows" in said
    assert "no speedup is exported" in said and "confirm_budget_s=300.0" in said

    doc = best_document(study, "sqlite:///x.db")
    assert doc is not None
    assert doc["best_trial"] == 0 and doc["knobs"] == {"amp": "off"} and doc["speedup"] == 1.0
    assert doc["speedup_text"].startswith("none shown: the fastest finalist, trial 1")
    assert "includes 1.0" in doc["speedup_text"]
    assert doc["contention"]["could_not_measure"] == said

    lines = " ".join(confirmation_lines(doc))
    assert "speedup: none shown" in lines and "load: other processes used 1.0 of 2 cores" in lines
    page = markdown(gather(study, "sqlite:///x.db"))
    assert "Could not measure" in page and "none shown" in page


def test_a_quiet_study_whose_rounds_pinned_the_speedup_down_is_not_called_unmeasurable(
        ) -> None:
    """Ended on its budget short of +-5%, but known to +-2x that: noisy windows (12% CV) are
    stated, not held against the study (paired rounds cancel the drift)."""
    study = _study(QUIET, "budget", noise=0.12, runs1=NARROW)
    assert could_not_measure(study) is None
    doc = best_document(study, "sqlite:///x.db")
    assert doc is not None and doc["contention"]["windows"] == "no window was contended"
    assert doc["best_trial"] == 1 and "95% CI" in doc["speedup_text"]
    assert "Could not measure" not in markdown(gather(study, "sqlite:///x.db"))


def test_an_idle_machines_wider_interval_above_one_is_a_measured_speedup() -> None:
    """An idle VM's budget-bound rounds left the winner at +-11% (1.76x, its interval well
    above 1.0): short of the +-5% asked, but a speedup the data support, not "could not
    measure" (the threshold is three times the precision)."""
    study = _study(QUIET, "budget", noise=0.11, runs1=[180.0, 160.0, 190.0, 172.0])
    iv = study.user_attrs["confirmation"]["intervals"]["1"]
    half = (iv["ci_high"] - iv["ci_low"]) / 2 / iv["speedup"]
    assert 0.10 < half < 0.15 and iv["ci_low"] > 1.0
    assert could_not_measure(study) is None
    doc = best_document(study, "sqlite:///x.db")
    assert doc is not None and doc["best_trial"] == 1 and "95% CI" in doc["speedup_text"]


def test_a_quiet_study_left_too_imprecise_is_called_too_noisy() -> None:
    """No window contended, but 4 rounds left the speedup known only to far worse than +-10%:
    the study says its measurements were too noisy (not too busy), and keeps your
    configuration since the interval includes 1.0."""
    study = _study(QUIET, "budget", noise=0.15)
    said = could_not_measure(study) or ""
    assert said.startswith("this machine's measurements were too noisy to rank configurations")
    assert "after 4 rounds the speedup is known only to +-" in said and "15%" in said
    assert "too busy" not in said and "no speedup is exported" in said
    doc = best_document(study, "sqlite:///x.db")
    assert doc is not None and doc["best_trial"] == 0 and doc["speedup_text"].startswith("none shown")


def test_a_confirmation_that_reached_its_precision_is_trusted_under_load() -> None:
    """Contended windows, but the rounds still pinned the speedup down: nothing to refuse."""
    assert could_not_measure(_study(BUSY, "precision", noise=0.15)) is None


def test_a_precise_speedup_whose_load_fell_on_one_side_is_not_trusted() -> None:
    """Beside `stress-ng --cpu 1` in another session the baseline's two threads waited for a
    core half the time and a one-thread finalist did not: 19.8x, known to +-2%, where the idle
    machine's median is 1.9x. The ratio measures the load: the study says so and exits 4."""
    study = _study(BUSY, "precision", noise=0.02, runs1=[1980.0, 1950.0, 2010.0, 1990.0],
                   contended={"0": [True] * 4, "1": [False] * 4})
    said = could_not_measure(study) or ""
    assert said.startswith("this machine was too busy to measure: the load fell on one side")
    assert "the baseline's windows were contended in 4 of 4 rounds, trial 1's in 0" in said
    assert "other processes used 1.0 of 2 cores" in said
    assert "19.8" in said and "not what the configurations give on a quiet one" in said
    assert "it is exported as measured" in said
    doc = best_document(study, "sqlite:///x.db")
    assert doc is not None and doc["best_trial"] == 1
    assert doc["contention"]["could_not_measure"] == said
    assert "Could not measure" in markdown(gather(study, "sqlite:///x.db"))


def test_a_load_that_hit_both_sides_or_spared_enough_rounds_is_not_one_sided() -> None:
    """Even load (both sides contended) leaves the paired ratio to cancel it; and three quiet
    rounds on both sides are what the interval is computed from (search/choose.interval_of)."""
    both = _study(BUSY, "precision", noise=0.02, runs1=NARROW)
    assert could_not_measure(both) is None
    spared = _study(BUSY, "precision", noise=0.02, runs1=NARROW,
                    contended={"0": [True, False, False, False], "1": [False] * 4})
    assert could_not_measure(spared) is None
    # Two one-sided rounds of four: under three, a passing load, not a finding.
    passing = _study(BUSY, "precision", noise=0.02, runs1=NARROW,
                     contended={"0": [True, True, False, False], "1": [False] * 4})
    assert could_not_measure(passing) is None


def test_a_supported_speedup_measured_beside_a_load_says_it_holds_beside_that_load() -> None:
    """Beside `stress-ng --cpu 1` every window of a study was contended, on both sides, and
    its confirmation ended on its budget: 3.23x, 95% CI 3.08-3.39x, where the idle runs'
    median is 2.07x. The speedup is exported, said to hold beside that load only."""
    study = _study(BUSY, "budget", noise=0.05, runs1=[180.0, 160.0, 190.0, 172.0])
    said = could_not_measure(study) or ""
    assert said.startswith("this machine was too busy to measure")
    assert "supported by its interval beside that load" in said
    assert "not what the configurations give on a quiet one" in said
    doc = best_document(study, "sqlite:///x.db")
    assert doc is not None and doc["best_trial"] == 1


def test_windows_contended_by_steal_alone_say_so_once_over_their_range() -> None:
    """The README's study on a VM whose hypervisor took 8-10% in 2 of 42 windows said "other
    processes used 0.0 of 2 cores during 2 of 42 windows (...the hypervisor took 10% ...; the
    hypervisor took 8% ...)" (2026-11-27): no other process was there, and one cause read as two."""
    from autotune.results.trust import load_statement

    def stolen(share: float) -> dict[str, Any]:
        return {"contended": True, "cpus": 2, "other_cpu_cores": 0.01, "steal_share": share,
                "runqueue_wait_share": 0.01,
                "reasons": [f"the hypervisor took {100 * share:.0f}% of the CPU time (steal)"]}

    said = load_statement([stolen(0.1), stolen(0.08), QUIET, QUIET])
    assert said == ("2 of 4 windows were contended, and the trial's threads waited for a core "
                    "1% of the time they were ready to run (the hypervisor took 8-10% of the "
                    "CPU time (steal))")
    # Other processes beside steal: both named, each once.
    mixed = load_statement([{**BUSY, "steal_share": 0.06,
                             "reasons": [*BUSY["reasons"], "the hypervisor took 6% of the CPU "
                                         "time (steal)"]}, QUIET])
    assert mixed == ("other processes used 1.0 of 2 cores during 1 of 2 windows, and the "
                     "trial's threads waited for a core 40% of the time they were ready to run "
                     "(the hypervisor took 6% of the CPU time (steal))")


def test_other_processes_are_counted_against_the_machines_cores_not_a_ranks() -> None:
    """A rank's window runs on its own core (cpus 1) while other processes are counted over the
    node: a 2-rank study on 2 cores said "0.6 of 1 cores" (2026-11-28). A record without
    machine_cpus (older studies) keeps its cpus; one core is singular."""
    from autotune.results.trust import load_statement

    rank = {**BUSY, "cpus": 1, "machine_cpus": 2, "other_cpu_cores": 0.6}
    said = load_statement([rank, {**QUIET, "cpus": 1, "machine_cpus": 2}])
    assert said is not None and said.startswith("other processes used 0.6 of 2 cores during 1 of "
                                                "2 windows"), said
    lone = load_statement([{**BUSY, "cpus": 1, "other_cpu_cores": 0.6}])
    assert lone is not None and lone.startswith("other processes used 0.6 of 1 core during"), lone


def test_a_budget_that_ends_the_choice_undecided_on_wide_intervals_is_too_noisy() -> None:
    """Without study.confirm_precision the width judged is the indifference zone's: rounds that
    ended on the budget before the selection decided, with the speedup known only to worse than
    three zones, are too noisy to rank configurations; the same rounds decided are not."""
    study = _study(QUIET, "budget", noise=0.15)
    conf = dict(study.user_attrs["confirmation"])
    conf.update({"precision": None, "decided": False, "precise": None,
                 "selection": {"indifference": 0.05, "correct_selection": 0.95, "systems": 1}})
    study.set_user_attr("confirmation", conf)
    said = could_not_measure(study) or ""
    assert said.startswith("this machine's measurements were too noisy to rank configurations")
    assert "without deciding among the finalists" in said, said
    study.set_user_attr("confirmation", {**conf, "decided": True})
    assert could_not_measure(study) is None


def test_a_noisy_baseline_is_read_on_the_rounds_that_count() -> None:
    """The winner beat the runner-up in every quiet round; the one round the runner-up read
    fastest ran beside other work. Left out (intervals.counted_rounds, as every comparison
    reads rounds), the configurations are ranked and only the baseline's spread is wide;
    counted, the runner-up would be within reach and the study too noisy to rank them."""
    from autotune.results.trust import baseline_noise

    conf = {"finalists": [7, 5], "baseline_trial": 0, "rounds": 4, "leader": 7,
            "established": True, "precision": 0.05, "stopped": "budget",
            "runs": {"7": [10281.0, 10423.0, 10322.0, 10300.0],
                     "5": [9455.0, 9524.0, 9209.0, 12000.0],
                     "0": [564.0, 464.0, 667.0, 600.0]},
            "contended": {"7": [False] * 4, "5": [False, False, False, True], "0": [False] * 4}}
    words = baseline_noise(conf)
    assert words and "the finalists are ranked" in words
    counted = {**conf, "contended": {n: [False] * 4 for n in ("7", "5", "0")}}
    assert baseline_noise(counted) is None
