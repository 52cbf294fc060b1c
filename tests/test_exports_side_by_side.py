"""benchmarks/exports_side_by_side.py: what it says about exports measured side by side."""

from __future__ import annotations

from benchmarks.exports_side_by_side import BASELINE, report


def test_report_tells_exports_apart_only_where_the_paired_rounds_do_and_states_the_drift():
    base = [100.0, 104.0, 98.0, 101.0]
    sessions = [
        {BASELINE: base, "a": [200.0, 206.0, 197.0, 203.0], "b": [199.0, 209.0, 195.0, 201.0],
         "c": [150.0, 157.0, 146.0, 152.0]},
        {BASELINE: base, "a": [220.0, 227.0, 216.0, 222.0], "b": [221.0, 226.0, 217.0, 224.0],
         "c": [165.0, 171.0, 161.0, 167.0]},
    ]
    claims = {"a": "2.00x, 95% CI 1.9-2.1x, 6 rounds", "b": "2.0x", "c": "1.5x"}
    text = report(sessions, claims, "head")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| export")}
    assert "+9.8%" in rows["a"]  # 2.00x then 2.20x: the between-session shift is stated
    assert "2.00x, 95% CI 1.9-2.1x, 6 rounds" in rows["a"]  # beside the study's own claim
    verdicts = {line[2:3]: line for line in text.splitlines() if line.startswith("- ")}
    assert set(verdicts) in ({"a", "c"}, {"b", "c"})  # a and b: one is the fastest, ...
    tied = verdicts.get("a") or verdicts["b"]
    assert "cannot be told apart" in tied  # ... the other within the rounds' noise of it
    assert "slower by 25" in verdicts["c"]
