"""Two answers, told apart: every knob is classed by what it does to training (speed,
numerics, training); a study confirms the fastest configuration and the fastest that trains
the same model, each with its interval; best.yaml holds the one study.training asks for and
states the other, written beside it as its own file, which load_best, verify, the Hydra
overlay and the framework exports take like best.yaml."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

import autotune
from autotune.core.console import DETAIL
from autotune.core.effects import same_training_knobs, training_changes
from autotune.core.knobs import EFFECTS, KNOBS, Knob
from autotune.results.intervals import paired_speedup
from autotune.search.confirmation.choose import Candidate, racing
from tests.conftest import BARE_ARGS, run_cli

# -- the classes ---------------------------------------------------------------------------


def test_every_knob_is_classed_with_why() -> None:
    """A knob's class decides the same-training answer: each one has one, and a reason where
    it changes more than speed (the reference prints both)."""
    for knob in KNOBS:
        assert knob.effect in EFFECTS, knob.name
        if knob.effect != "speed":
            assert knob.effect_reason and len(knob.effect_reason) > 30, knob.name
        assert not (knob.changes_training and knob.changes_numerics), knob.name
    by = {k.name: k.effect for k in KNOBS}
    assert {n for n, e in by.items() if e == "training"} == {
        "batch_size", "length_grouping", "broadcast_buffers"}
    assert {n for n, e in by.items() if e == "numerics"} == {
        "amp", "tf32", "compile", "transform_split", "comm_hook", "padding_free",
        "fsdp_param_dtype", "fsdp_reduce_dtype", "optimizer", "liger_kernel"}
    assert by["num_workers"] == by["channels_last"] == by["activation_checkpointing"] == "speed"
    # fp32 sharding sums the same gradients in another order, as any change of kernel does.
    assert by["sharding"] == by["fsdp_wrap_blocks"] == by["fsdp_cpu_offload"] == "speed"


def test_a_knob_without_its_class_is_refused() -> None:
    """The class is a required field: a knob added to the registry without one fails where it
    is declared, not in a study that would call it speed-only."""
    with pytest.raises(TypeError, match="changes_training"):
        Knob("new_knob", "doc", lambda env, wl: None)  # type: ignore[call-arg]
    assert Knob("new_knob", "doc", lambda env, wl: None, changes_training=None).effect == "speed"


def test_the_knob_reference_states_each_knobs_class() -> None:
    from tests.test_docs import reference

    page = reference.knobs_markdown()
    for knob in KNOBS:
        section = page.split(f"\n## {knob.name}\n", 1)[1].split("\n## ", 1)[0]
        assert f"**Effect on training: {knob.effect}**" in section, knob.name
        if knob.effect_reason:
            assert knob.effect_reason in section, knob.name
    for effect, meaning in EFFECTS.items():
        assert f"| {effect} | {meaning} |" in page


def test_what_a_configuration_changes_in_training() -> None:
    base = {k.name: k.off for k in KNOBS} | {"batch_size": 32, "num_workers": 0}
    best = {**base, "batch_size": 128, "num_workers": 2, "prefetch_factor": 4, "amp": "bf16",
            "length_grouping": True}
    changes = training_changes(best, base)
    assert changes == {
        "batch_size": "batch_size 32 -> 128: 4x fewer optimizer steps per epoch at the same "
                      "learning rate",
        "length_grouping": f"length_grouping False -> True: "
                           f"{next(k for k in KNOBS if k.name == 'length_grouping').changes_training}"}
    # In a study that accumulates (a global batch of 128 per rank: 32 x 4), batch_size is a
    # micro-batch: 128 x 1 is the same global batch (tests/test_global_batch.py says more).
    assert list(training_changes(best, base, global_batch=128)) == ["length_grouping"]
    # The same training: the training knobs back at the user's, speed and numerics kept.
    same = same_training_knobs(best, base)
    assert same == {**best, "batch_size": 32, "length_grouping": False}
    assert training_changes(same, base) == {}
    # A knob made inactive by the values restored takes its off value.
    packed = {**base, "padding_free": True, "pad_to_multiple_of": None, "batch_size": 64}
    assert same_training_knobs(packed, base)["pad_to_multiple_of"] is None


def test_the_rounds_keep_the_same_training_leader_though_the_overall_leader_is_faster() -> None:
    """Racing drops a finalist shown slower than the leader; the fastest same-training finalist
    stays in the rounds (its own interval is the second answer), a slower one does not."""
    base = [100.0 * (1 + 0.01 * (i % 3)) for i in range(8)]

    def cand(n: int, ratio: float) -> Candidate:
        runs = [b * ratio * (1 + 0.005 * (i % 2)) for i, b in enumerate(base)]
        return Candidate(n, paired_speedup(runs, base), 1, 1.0, tuple(runs))

    lead, same_fast, same_slow = cand(1, 2.4), cand(2, 1.5), cand(3, 1.2)
    assert [c.number for c in racing([lead, same_fast, same_slow], same=())] == [1]
    assert [c.number for c in racing([lead, same_fast, same_slow], same={2, 3})] == [1, 2]


# -- the confirmation, in process, on planted windows ----------------------------------------

#: Each configuration's figure (samples/s) in the planted windows: the baseline; the fastest,
#: a 4x batch with bf16 and the retaining allocator; another 4x batch; the same-training trial
#: measured for the best (its speed and numerics knobs at batch 32); a slower same-training one.
FIGURES = {"base": 100.0, "big": 240.0, "big_plain": 190.0, "same": 150.0, "same_slow": 120.0}


def _planted(tmp_path: Path, training: str = "any") -> tuple[Any, optuna.Study, dict[str, int]]:
    from optuna.distributions import IntDistribution

    from autotune.cli.app import build_setup
    from autotune.cli.config import Config, StudyConfig, WindowConfig
    from autotune.results.record import set_study_attrs
    from tests.conftest import TINY_WINDOW

    cfg = Config(workload={"_target_": "autotune.workloads.mlp.MLPWorkload"}, device="cpu",
                 study=StudyConfig(out_dir=str(tmp_path / "studies"), agent=False,
                                   confirm_precision=0.05, confirm_budget_s=300,
                                   training=training),
                 window=WindowConfig(**TINY_WINDOW))
    setup = build_setup(cfg, [])[0]
    base = setup.space.baseline
    assert base["batch_size"] == 32 and base["amp"] == "off"
    configs = {
        "base": (base, "baseline"),
        "big": ({**base, "batch_size": 128, "amp": "bf16", "host_allocator": "retain"}, "sampler"),
        "big_plain": ({**base, "batch_size": 128}, "sampler"),
        "same_slow": ({**base, "host_allocator": "retain"}, "sampler"),
        "same": (same_training_knobs({**base, "batch_size": 128, "amp": "bf16",
                                      "host_allocator": "retain"}, base), "same_training"),
    }
    study = optuna.create_study(direction="maximize")
    set_study_attrs(study, {"training": training, "workload": "mlp (planted)"})
    numbers = {}
    for name, (knobs, source) in configs.items():
        study.add_trial(optuna.trial.create_trial(
            params={"batch_size": knobs["batch_size"]},
            distributions={"batch_size": IntDistribution(1, 256)}, value=FIGURES[name],
            user_attrs={"knobs": knobs, "outcome": "ok", "peak_memory_gb": 0.3,
                        "source": source, "ceiling_noise": {"window": 0.01},
                        "optimizer": "SGD"},  # the MLP's, as its trials record it
            system_attrs={"constraints": [-1.0]}))
        numbers[name] = len(study.trials) - 1
    return setup, study, numbers


def _serve(study: optuna.Study, numbers: dict[str, int],
           figures: dict[str, float] = FIGURES) -> Any:
    from autotune.measure.protocol import WindowResult

    names = {json.dumps(study.trials[n].user_attrs["knobs"], sort_keys=True): name
             for name, n in numbers.items()}

    def run(req: Any, trial_dir: Path, **_: Any) -> WindowResult:
        i = int(trial_dir.name.split("-")[0])
        name = names[json.dumps(req.knobs, sort_keys=True)]
        figure = figures[name] * (1 + 0.01 * math.sin(3 * i + len(name)))
        return WindowResult(outcome="ok", samples_per_sec=figure, steps=10, wall_s=1.0)
    return run


def test_the_confirmation_states_the_same_training_answer_with_its_interval(
        tmp_path: Path) -> None:
    from autotune.search.confirmation import confirm as confirm_mod

    setup, study, n = _planted(tmp_path)
    record = confirm_mod.confirm(setup, study, 3, 1, run=_serve(study, n))
    assert record is not None
    # The finalists: the fastest, and beside it the same-training trial measured for it (the
    # fastest that trains the same model); the slower same-training trial is not raced.
    assert n["big"] in record["finalists"] and n["same"] in record["finalists"]
    assert n["same_slow"] not in record["finalists"]
    assert record["best_trial"] == n["big"] and record["speedup"] == pytest.approx(2.4, abs=0.05)
    same = record["same_training"]
    assert same["finalists"] == [n["same"]] and same["same_as_best"] is False
    assert same["best_trial"] == n["same"] and same["established"] is True
    low, high = same["speedup_ci"]
    assert low <= same["speedup"] <= high < 1.6 and low > 1.4 and same["speedup"] == pytest.approx(1.5, abs=0.05)
    assert f"{record['rounds']} rounds" in same["speedup_text"]
    # It was measured in every round, as the leader was: its interval is its own.
    assert len([v for v in record["runs"][str(n["same"])] if v]) == record["rounds"]


def test_both_answers_are_written_and_read_back(tmp_path: Path) -> None:
    from autotune.adapters.hf.workload import training_arguments_kwargs
    from autotune.adapters.lightning.workload import lightning_document
    from autotune.results.export import write_exports
    from autotune.search.confirmation import confirm as confirm_mod

    setup, study, n = _planted(tmp_path)
    confirm_mod.confirm(setup, study, 3, 1, run=_serve(study, n))
    out = tmp_path / "out"
    write_exports(study, out, "sqlite:///planted.db")
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["best_trial"] == n["big"] and best["training"]["this"]["answer"] == "any"
    words = best["training"]["words"]
    figure, interval = best["speedup_text"].split(", ", 1)  # "2.40x", "95% CI ..., 3 rounds"
    assert words.startswith(f"{figure} ({interval}) with batch_size 32 -> 128: 4x fewer "
                            "optimizer steps per epoch at the same learning rate; scale the "
                            "learning rate x4 (the linear rule for SGD, which this workload's "
                            "SGD is, with warm-up: Goyal et al. 2017, "
                            "https://arxiv.org/abs/1706.02677)")
    same_text = best["confirmation"]["same_training"]["speedup_text"]
    assert f"or take the same-training configuration (trial {n['same']}" in words
    same_figure, same_interval = same_text.split(", ", 1)
    assert words.endswith(f"{same_figure} ({same_interval}), best-same-training.yaml")
    assert "amp off -> bf16" in words  # what it still changes: its arithmetic, said

    # The other answer is a best.yaml of its own: load_best round-trips it, and it states the
    # first answer as its other.
    other = autotune.load_best(out / "best-same-training.yaml", check_environment=False)
    assert other.knobs == study.trials[n["same"]].user_attrs["knobs"]
    assert other.document["best_trial"] == n["same"]
    assert other.document["speedup_text"] == same_text
    assert other.document["training"]["this"]["changes"] == {}
    assert other.document["training"]["other"]["file"] == "best.yaml"
    assert autotune.load_best(out / "best.yaml", check_environment=False).knobs["batch_size"] == 128
    # ... with its Hydra option, its override list and the framework exports' documents.
    option = (out / "hydra" / "autotune" / "best-same-training.yaml").read_text()
    assert "+autotune=best-same-training" in option
    assert yaml.safe_load(option)["knobs"] == other.knobs
    assert "knobs.batch_size=32" in (out / "overrides-same-training.txt").read_text().split()
    path = str(out / "best-same-training.yaml")
    assert training_arguments_kwargs(path)["per_device_train_batch_size"] == 32
    assert training_arguments_kwargs(path)["bf16"] is True
    assert lightning_document(path)["dataloader"]["batch_size"] == 32
    rows = {int(r["number"]): r for r in _csv(out / "trials.csv")}
    assert rows[n["big"]]["changes_training"] == "batch_size"
    assert rows[n["same"]]["changes_training"] == ""


def _csv(path: Path) -> list[dict[str, str]]:
    import csv

    return list(csv.DictReader(path.open()))


def test_the_summary_states_both_answers(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                         ) -> None:
    from autotune.results.export import best_document
    from autotune.search.confirmation import confirm as confirm_mod
    from autotune.search.console.summary import print_summary

    setup, study, n = _planted(tmp_path)
    confirm_mod.confirm(setup, study, 3, 1, run=_serve(study, n))
    doc = best_document(study, "")
    assert doc is not None
    caplog.clear()
    with caplog.at_level(DETAIL, logger="autotune"):
        print_summary(doc, {"trials": 5, "complete": 5, "infeasible": 0, "pruned": 0,
                            "failed": 0}, setup)
    said = "\n".join(caplog.messages)
    line = next(s for s in said.splitlines() if s.startswith("  training: "))
    assert "4x fewer optimizer steps per epoch" in line and "x4 (the linear rule for SGD" in line
    assert line.endswith(f"{setup.out_dir}/best-same-training.yaml")
    assert f"best config: {setup.out_dir / 'best.yaml'} (and " \
           f"{setup.out_dir / 'best-same-training.yaml'})" in said
    assert "same training" in next(s for s in said.splitlines() if "finalists:" in s)


def test_study_training_same_puts_the_same_training_answer_in_best_yaml(tmp_path: Path) -> None:
    from autotune.results.export import write_exports
    from autotune.search.confirmation import confirm as confirm_mod

    setup, study, n = _planted(tmp_path, training="same")
    confirm_mod.confirm(setup, study, 3, 1, run=_serve(study, n))
    out = tmp_path / "out"
    (out).mkdir()
    (out / "best-same-training.yaml").write_text("stale: from the study's earlier setting\n")
    write_exports(study, out, "")
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["best_trial"] == n["same"] and best["training"]["setting"] == "same"
    assert best["knobs"]["batch_size"] == 32
    fastest = yaml.safe_load((out / "best-any-training.yaml").read_text())
    assert fastest["best_trial"] == n["big"] and fastest["knobs"]["batch_size"] == 128
    assert best["training"]["words"].endswith("best-any-training.yaml")
    assert "the fastest of all, trial" in best["training"]["words"]
    assert not (out / "best-same-training.yaml").exists()  # one file per answer


def test_a_best_that_trains_the_same_model_is_said_once_and_written_once(tmp_path: Path) -> None:
    from autotune.results.export import write_exports
    from autotune.search.confirmation import confirm as confirm_mod

    setup, study, n = _planted(tmp_path)
    # The same-training trial measures fastest in the rounds: it is the one answer.
    record = confirm_mod.confirm(setup, study, 3, 1,
                                 run=_serve(study, n, {**FIGURES, "same": 300.0}))
    assert record is not None and record["best_trial"] == n["same"]
    assert record["same_training"]["same_as_best"] is True
    out = tmp_path / "out"
    write_exports(study, out, "")
    best = yaml.safe_load((out / "best.yaml").read_text())
    assert best["training"]["other"] is None
    assert f"trial {n['same']} trains the same model as yours" in best["training"]["words"]
    assert not list(out.glob("best-*-training.yaml"))


# -- a real study -----------------------------------------------------------------------------

#: Sleeps make the answers known in advance, whatever else the machine runs: 3 ms per item (a
#: slow read, which DataLoader workers overlap) and 25 ms per step (paid less often by a 4x
#: batch). Workers alone (the same training) about double the baseline; with the 4x batch
#: about four times it.
TWO_ANSWERS = ["workload._target_=tests.workloads_diag.TwoAnswersWorkload", "device=cpu",
               "knobs.batch_size=[8,32]", "knobs.num_workers=[0,2]", "knobs.amp=off",
               "knobs.prefetch_factor=2", "knobs.persistent_workers=true",
               "knobs.host_allocator=default", "knobs.cpu_threads=1",
               "knobs.optimizer_impl=default", "knobs.set_to_none=true"]


@pytest.fixture(scope="module")
def two_answers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A real study (search figures, no confirmation: the planted tests above cover it)."""
    cwd = tmp_path_factory.mktemp("answers")
    proc = run_cli([*TWO_ANSWERS, "study.name=two", "study.n_trials=4", *BARE_ARGS], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd / "studies" / "two", proc.stdout + proc.stderr


def test_a_real_study_writes_the_same_training_answer(two_answers: tuple[Path, str]) -> None:
    folder, out = two_answers
    assert "answers: best.yaml holds the fastest configuration, whatever it changes in " \
           "training (study.training=any, the default)" in out
    best = autotune.load_best(folder / "best.yaml", check_environment=False)
    other = autotune.load_best(folder / "best-same-training.yaml", check_environment=False)
    assert best.knobs["batch_size"] == 32 and other.knobs["batch_size"] == 8
    assert other.knobs["num_workers"] == 2  # the workers, at the user's batch
    assert "batch_size 8 -> 32: 4x fewer optimizer steps per epoch" in out
    # Its trials recorded the optimizer they built (SGD): the words state SGD's rule alone.
    assert "scale the learning rate x4 (the linear rule for SGD, which this workload's SGD is" in out
    assert f"{folder.relative_to(folder.parent.parent)}/best-same-training.yaml" in out
    study = optuna.load_study(study_name="two", storage=f"sqlite:///{folder}/study.db")
    sources = [t.user_attrs.get("source") for t in study.trials]
    if best.knobs["num_workers"] == 2:  # the best's own workers at batch 8, measured
        assert "same_training" in sources or any(
            t.user_attrs.get("knobs") == other.knobs for t in study.trials[:4])


def test_verify_takes_the_same_training_answer(two_answers: tuple[Path, str]) -> None:
    folder, _ = two_answers
    path = folder / "best-same-training.yaml"
    proc = run_cli(["verify", str(path), "--rounds", "2", "--steps", "6", "--warmup", "2"],
                   folder.parent.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "autotune verify: realized" in proc.stdout
    result = json.loads((folder / "verify-best-same-training.json").read_text())
    assert result["study_text"] == yaml.safe_load(path.read_text())["speedup_text"]
    assert not (folder / "verify.json").exists()  # best.yaml's own verification untouched
    sides = yaml.safe_load((folder / "verify-best-same-training" / "baseline.yaml").read_text())
    assert sides["knobs"]["batch_size"] == 8 and sides["knobs"]["num_workers"] == 0


def test_a_same_training_answer_the_numerics_check_refuses_is_not_exported(
        tmp_path: Path) -> None:
    """The numerics check checks both answers; where it refuses the same-training one, that
    answer is chosen again without it (never the refused configuration), and the overall
    answer stands."""
    from autotune.results.record import set_study_attrs
    from autotune.results.trials import chosen_trial
    from autotune.search.checks.numerics import _repick_confirmation
    from autotune.search.confirmation import confirm as confirm_mod

    setup, study, n = _planted(tmp_path)
    confirm_mod.confirm(setup, study, 3, 1, run=_serve(study, n))
    results = {str(n["same"]): {"passed": False, "reason": "refused: planted"},
               str(n["big"]): {"passed": True}}
    set_study_attrs(study, {"numerics": {"steps": 3, "trials": results}})
    _repick_confirmation(study, results)
    conf = study.user_attrs["confirmation"]
    assert conf["best_trial"] == n["big"]
    assert conf["same_training"].get("best_trial") != n["same"]  # chosen again, without it
    same, _ = chosen_trial(study, "same")
    assert same is not None and same.number != n["same"]
    assert same.number in (n["same_slow"], n["base"])
