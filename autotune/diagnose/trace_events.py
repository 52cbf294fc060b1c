"""The events of a parsed torch.profiler Chrome trace, and the interval arithmetic over them.

Shared by the step's summary (trace_summary.py) and the ranks' communication (comm_trace.py):
both ask which events lie inside which others, per thread, and how much time a set of
intervals covers or shares with another.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from autotune.core.numbers import finite


class Event:
    """A complete ('X') event: a span of one thread's (or stream's) timeline, in us."""

    __slots__ = ("name", "cat", "ts", "dur", "tid", "args")

    def __init__(self, name: str, cat: str, ts: float, dur: float, tid: Any, args: dict[str, Any]):
        self.name, self.cat, self.ts, self.dur, self.tid, self.args = name, cat, ts, dur, tid, args

    @property
    def end(self) -> float:
        return self.ts + self.dur


def events(trace: Any) -> tuple[list[Event], list[dict[str, Any]]]:
    """Complete ('X') events with numeric times, and memory instant events."""
    raw = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    spans: list[Event] = []
    memory: list[dict[str, Any]] = []
    if not isinstance(raw, list):
        return spans, memory
    for e in raw:
        if not isinstance(e, dict):
            continue
        name = e.get("name")
        args: dict[str, Any] = e["args"] if isinstance(e.get("args"), dict) else {}
        if e.get("ph") == "i" and name == "[memory]":
            memory.append(args)
            continue
        if e.get("ph") != "X" or not isinstance(name, str):
            continue
        ts, dur = finite(e.get("ts")), finite(e.get("dur"))
        if ts is None or dur is None or dur < 0:
            continue
        spans.append(Event(name, str(e.get("cat", "")).lower(), ts, dur, e.get("tid"), args))
    return spans, memory


class Spans:
    """Intervals per thread, for "is this event inside one of them?" in O(log n): sorted
    starts with a running maximum of ends (exists start <= ts with end >= event end)."""

    def __init__(self, evs: Iterable[Event]):
        per: dict[Any, list[tuple[float, float]]] = defaultdict(list)
        for ev in evs:
            per[ev.tid].append((ev.ts, ev.end))
        self.tids: dict[Any, tuple[list[float], list[float]]] = {}
        for tid, spans in per.items():
            spans.sort()
            starts, max_ends, top = [], [], -math.inf
            for s, e in spans:
                top = max(top, e)
                starts.append(s)
                max_ends.append(top)
            self.tids[tid] = (starts, max_ends)

    def contain(self, ev: Event) -> bool:
        found = self.tids.get(ev.tid)
        if not found:
            return False
        i = bisect.bisect_right(found[0], ev.ts) - 1
        return i >= 0 and found[1][i] >= ev.end


class Points:
    """Event start times per thread, for "does this event contain one of them?"."""

    def __init__(self, evs: Iterable[Event]):
        self.tids: dict[Any, list[float]] = defaultdict(list)
        for ev in evs:
            self.tids[ev.tid].append(ev.ts)
        for times in self.tids.values():
            times.sort()

    def any_within(self, ev: Event) -> bool:
        times = self.tids.get(ev.tid, [])
        i = bisect.bisect_left(times, ev.ts)
        return i < len(times) and times[i] <= ev.end


def by_tid(evs: Iterable[Event]) -> dict[Any, list[tuple[float, float]]]:
    out: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for e in evs:
        out[e.tid].append((e.ts, e.end))
    return out


def self_times(ops: list[Event]) -> dict[str, float]:
    """Self time per op name: duration minus the direct children's, per thread (a stack)."""
    self_us: dict[str, float] = defaultdict(float)
    threads: dict[Any, list[Event]] = defaultdict(list)
    for op in ops:
        threads[op.tid].append(op)
    for evs in threads.values():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[list[Any]] = []  # [event, children's total]
        for ev in evs:
            while stack and ev.ts >= stack[-1][0].end:
                done, child = stack.pop()
                self_us[done.name] += max(0.0, done.dur - child)
            if stack:
                stack[-1][1] += ev.dur
            stack.append([ev, 0.0])
        while stack:
            done, child = stack.pop()
            self_us[done.name] += max(0.0, done.dur - child)
    return self_us


Interval = tuple[float, float]


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time (two gloo threads' ranges overlap)."""
    out: list[Interval] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        elif e > s:
            out.append((s, e))
    return out


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Time two sets of disjoint, sorted intervals share (a two-pointer walk)."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def minus(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """``a`` without the time of ``b`` (both disjoint and sorted)."""
    out, j = [], 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k, cur = j, s
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out

def covered(intervals: Iterable[Interval]) -> float:
    """The time a set of possibly overlapping intervals covers."""
    return sum(e - s for s, e in merged(intervals))
