#!/usr/bin/env python3
"""Checks a `timerkit-bench --quick --json` report: the keys users' scripts read, and that every
backend the bench knows appears in every scenario it belongs to. Exit 1 on any problem."""
import json, subprocess, sys

LATENCY = {"scenario", "backend", "interval_us", "fires", "missed", "lateness_us", "p50_us"}
ESTIMATE = {"median", "ci95_low", "ci95_high", "confidence", "slices"}
MACHINE = {"cpu", "cores", "kernel", "clock_source", "build", "compiler", "load_average_before", "load_average_after", "realtime_priority"}
PERCENTILES = {"p50", "p90", "p99", "p999", "max"}
THROUGHPUT = {"scenario", "backend", "timers", "schedule_ns", "reset_ns", "cancel_ns", "schedule_ns_p99", "reset_ns_p99",
              "cancel_ns_p99", "bytes_per_timer", "schedule_ns_estimate", "reset_ns_estimate", "cancel_ns_estimate"}
STALLS = {"scenario", "backend", "timers", "phases"}
STALL_PHASE = {"phase", "max_ns", "recurring_max_ns", "recurring_index", "recurring_over50_us", "recurring_p9999_ns"}
FANOUT = {"scenario", "backend", "timers", "tolerance_us", "fires", "cpu_ns_per_fire", "lateness_us", "max_lateness_over_tolerance_us", "peak_fires_per_ms", "jitter_us", "herd", "cpu_ns_per_fire_estimate"}
ASYNC = {"scenario", "backend", "mode", "executor", "samples", "interval_us", "lateness_us", "floor_p50_us", "p50_us"}
FIRST_FIRE = {"scenario", "backend", "samples", "lateness_us", "p50_us"}
IDLE = {"scenario", "backend", "seconds", "wakeups", "wakeups_above_baseline", "wakeups_per_second_above_baseline"}
DISPLAY = {"scenario", "backend", "refresh_hz", "frames", "dropped", "priority", "jitter_us", "lateness_us", "lateness_p50_us"}
# Each scenario's figures with an interval: every one must carry the interval's keys and its slices.
TIMERKIT_BACKENDS = {"epoll", "epoll-pwait2", "io_uring", "libevent", "dispatch", "runloop", "nio"}
ESTIMATES = {"latency": ["p50_us"], "throughput": ["schedule_ns_estimate", "reset_ns_estimate", "cancel_ns_estimate"],
             "first-fire": ["p50_us"], "fanout": ["cpu_ns_per_fire_estimate"], "idle": ["wakeups_per_second_above_baseline"],
             "display": ["lateness_p50_us"], "async": ["p50_us"]}
# The async scenario's rows for a TimerKit backend, and the two peers it is compared with.
ASYNC_VARIANTS = {(mode, executor) for mode in ("sleep", "ticks") for executor in ("global", "loop")}
ASYNC_PEERS = {("task-sleep", "sleep"), ("async-timer-sequence", "ticks")}

def main(path, bench):
    report = json.load(open(path))
    problems = []
    if not isinstance(report.get("machine"), dict):
        problems.append("no machine object")
    elif MACHINE - report["machine"].keys():
        problems.append(f"machine lacks {sorted(MACHINE - report['machine'].keys())}")
    # Backends this machine cannot run are named with the reason, so a run without them says so.
    if not isinstance(report.get("left_out"), dict):
        problems.append("no left_out object")
    results = report.get("results", [])
    known = [line.split() for line in subprocess.run([bench, "--list-backends", "--quick"], capture_output=True, text=True, check=True).stdout.splitlines()]
    expected = {"latency": set(), "throughput": set()}
    for name, scenarios in known:
        for scenario in scenarios.split(","):
            expected.setdefault(scenario, set()).add(name)
    seen = {"latency": set(), "throughput": set(), "stalls": set(), "async": set(), "fanout": set()}
    async_variants, async_peers = {}, set()
    for r in results:
        kind = r.get("scenario")
        for key in ESTIMATES.get(kind, []):
            value = r.get(key)
            if not isinstance(value, dict) or ESTIMATE - value.keys():
                problems.append(f"{kind} {r.get('backend')}: {key} is not an estimate with {sorted(ESTIMATE)}")
            elif len(value["slices"]) < 2 or not value["ci95_low"] <= value["median"] <= value["ci95_high"]:
                problems.append(f"{kind} {r.get('backend')}: {key} has {len(value['slices'])} slices, median outside its interval, or both")
        required = {"first-fire": FIRST_FIRE, "idle": IDLE, "display": DISPLAY}.get(kind)
        if required and required - r.keys():
            problems.append(f"{kind} {r.get('backend')}: missing keys {sorted(required - r.keys())}")
        if kind == "latency":
            missing = LATENCY - r.keys() or PERCENTILES - r.get("lateness_us", {}).keys() or ESTIMATE - r.get("p50_us", {}).keys()
            if r.get("fires", 0) <= 0:
                problems.append(f"latency {r.get('backend')}: no fires")
            # A TimerKit backend's own statistics of the same fires agree with the bench's
            # measurement, to within a histogram bucket (the floor and raw peers have none).
            stats = r.get("statistics")
            if r.get("backend") in TIMERKIT_BACKENDS and not stats:
                problems.append(f"latency {r.get('backend')}: no statistics from the backend")
            clocks = r.get("clock_p50_us")
            if r.get("backend") in TIMERKIT_BACKENDS and (not clocks or set(clocks) != {"monotonic", "continuous", "wall"}):
                problems.append(f"latency {r.get('backend')}: no lateness for each clock ({clocks})")
            if stats and stats.get("agrees_with_bench") is False:
                problems.append(f"latency {r.get('backend')}: its statistics disagree with the bench: {stats.get('agreement')}")
        elif kind == "throughput":
            missing = THROUGHPUT - r.keys() or next((ESTIMATE - r[k].keys() for k in ("schedule_ns_estimate", "reset_ns_estimate", "cancel_ns_estimate") if ESTIMATE - r[k].keys()), set())
            if r.get("schedule_ns", 0) <= 0 or r.get("reset_ns", 0) <= 0 or r.get("cancel_ns", 0) <= 0:
                problems.append(f"throughput {r.get('backend')}: no timing")
        elif kind == "stalls":
            phases = r.get("phases", [])
            missing = STALLS - r.keys() or next((STALL_PHASE - p.keys() for p in phases if STALL_PHASE - p.keys()), set())
            if [p.get("phase") for p in phases] != ["schedule", "reset", "cancel"] or any(p.get("recurring_max_ns", 0) <= 0 for p in phases):
                problems.append(f"stalls {r.get('backend')}: phases {[p.get('phase') for p in phases]} or no timing")
        elif kind == "fanout":
            missing = FANOUT - r.keys() or PERCENTILES - r.get("lateness_us", {}).keys()
            if r.get("fires", 0) <= 0 or r.get("cpu_ns_per_fire", 0) <= 0 or r.get("peak_fires_per_ms", 0) <= 0:
                problems.append(f"fanout {r.get('backend')}: no fires or no CPU time")
        elif kind == "async":
            missing = ASYNC - r.keys() or PERCENTILES - r.get("lateness_us", {}).keys()
            if r.get("samples", 0) <= 0:
                problems.append(f"async {r.get('backend')} {r.get('mode')} {r.get('executor')}: no samples")
            if (r.get("backend"), r.get("mode")) in ASYNC_PEERS:
                async_peers.add((r.get("backend"), r.get("mode")))
            else:
                if "callback_p50_us" not in r:
                    missing = missing | {"callback_p50_us"}
                async_variants.setdefault(r.get("backend"), set()).add((r.get("mode"), r.get("executor")))
                seen[kind].add(r.get("backend"))
            if missing:
                problems.append(f"async {r.get('backend')}: missing keys {sorted(missing)}")
            continue
        else:
            continue
        if missing:
            problems.append(f"{kind} {r.get('backend')}: missing keys {sorted(missing)}")
        seen[kind].add(r.get("backend"))
    for scenario in ("latency", "throughput", "stalls", "async", "fanout"):
        if seen[scenario] != expected.get(scenario, set()):
            problems.append(f"{scenario} backends {sorted(seen[scenario])} != expected {sorted(expected.get(scenario, set()))}")
    for backend, variants in async_variants.items():
        if variants != ASYNC_VARIANTS:
            problems.append(f"async {backend}: (mode, executor) rows {sorted(variants)} != {sorted(ASYNC_VARIANTS)}")
    if expected.get("async") and async_peers != ASYNC_PEERS:
        problems.append(f"async peers {sorted(async_peers)} != {sorted(ASYNC_PEERS)}")
    for p in problems:
        print("bench json:", p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"bench json: ok ({len(results)} results; latency: {', '.join(sorted(expected['latency']))}; throughput: {', '.join(sorted(expected['throughput']))}; async: {', '.join(sorted(expected.get('async', set())))} and {len(async_peers)} peers)")

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: check-bench-json.py REPORT.json PATH/TO/timerkit-bench")
    main(sys.argv[1], sys.argv[2])
