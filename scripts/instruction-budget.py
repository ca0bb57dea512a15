#!/usr/bin/env python3
"""Counts the instructions each timer-store operation costs, with valgrind (`--tool=cachegrind
--cache-sim=no`), and fails if any is past its budget + 5 %.

Usage: instruction-budget.py STORE_PROFILE BUDGETS.json

For each backend (manual, epoll) and path (handles, keys), `store-profile` runs three times
under valgrind with 100,000 live timers: with no operation, with 100,000 schedule + cancel
pairs, and with 100,000 resets to a later deadline; the differences divided by 100,000 are the
instructions per pair and per reset. With a "fire" budget for "manual", `store-profile fires`
also runs with 0 and 10,000 fires of one repeating timer on ManualBackend: the instructions per
fire of the Manual fire path. With one for "epoll", "libevent" or "dispatch", `store-profile loop-fires
BACKEND` runs with 0 and 2,000 fires of a repeating timer on that backend's loop thread: the
user-space instructions of a wake-up, its fire and its re-arm (valgrind knows neither
epoll_pwait2 nor io_uring, so the timerfd mode stands for the epoll loop's share); with one for
"display", the frames of a display link on a 1,000 Hz `DisplaySource`. With a
"statistics" budget, `store-profile fires` also runs with 0 and 10,000 fires with the scheduler
recording no statistics: the difference per fire from the Manual fire path is what recording
the statistics costs (a timing of the same, `statistics-cost`, moves by 5-15 ns with where a
process's memory lies; this count does not). Instruction counts do not move with the machine's load
(unlike times, which move 10-30 % from run to run on a shared VM), so the gate is exact: a
change that adds work to these paths fails it, whatever the machine is doing.

A deliberate change of cost moves the budget in the same commit (BUDGETS.json says why)."""
import concurrent.futures, json, os, re, subprocess, sys

LIVE = OPERATIONS = 100_000
MARGIN = 1.05

FIRES = 10_000
LOOP_FIRES = 2_000

def instructions(binary, backend, pairs, resets, path):
    arguments = (["fires", str(pairs)] if path == "fires" else
                 ["fires", str(pairs), "nostats"] if path == "fires-nostats" else
                 ["loop-fires", backend, str(pairs)] if path == "loop-fires" else
                 [backend, str(LIVE), str(pairs), str(resets)] + (["keys"] if path == "keys" else []))
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", binary] + arguments
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"instruction-budget: {' '.join(command)} failed:\n{result.stderr[-2000:]}")
    match = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    if not match:
        sys.exit(f"instruction-budget: no instruction count in valgrind's output:\n{result.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))

def main(binary, budget_file):
    loaded = json.load(open(budget_file))
    budgets = loaded["budgets"]
    fire_budget = loaded.get("fire", {}).get("manual")
    statistics_budget = loaded.get("statistics")
    loop_fire_budgets = {backend: budget for backend, budget in loaded.get("fire", {}).items() if backend != "manual"}
    runs = {}
    jobs = [(backend, path, pairs, resets)
            for backend in budgets for path in budgets[backend]
            for pairs, resets in [(0, 0), (OPERATIONS, 0), (0, OPERATIONS)]]
    if fire_budget is not None or statistics_budget is not None:
        jobs += [("manual", "fires", 0, 0), ("manual", "fires", FIRES, 0)]
    if statistics_budget is not None:
        jobs += [("manual", "fires-nostats", 0, 0), ("manual", "fires-nostats", FIRES, 0)]
    for backend in loop_fire_budgets:
        jobs += [(backend, "loop-fires", 0, 0), (backend, "loop-fires", LOOP_FIRES, 0)]
    # Two at a time: valgrind runs a program on one core.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        futures = {job: pool.submit(instructions, binary, job[0], job[2], job[3], job[1]) for job in jobs}
        runs = {job: future.result() for job, future in futures.items()}
    problems = []

    def check(name, value, budget, unit="instructions"):
        limit = budget * MARGIN
        ok = value <= limit
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {value:,.0f} {unit} (budget {budget:,}, fails above {limit:,.0f})")
        if not ok:
            problems.append(f"{name}: {value:,.0f} > {limit:,.0f}")

    for backend in budgets:
        for path in budgets[backend]:
            base = runs[(backend, path, 0, 0)]
            check(f"{backend} {path} pair", (runs[(backend, path, OPERATIONS, 0)] - base) / OPERATIONS,
                  budgets[backend][path]["pair"])
            check(f"{backend} {path} reset", (runs[(backend, path, 0, OPERATIONS)] - base) / OPERATIONS,
                  budgets[backend][path]["reset"])
    if fire_budget is not None:
        check("manual fire path", (runs[("manual", "fires", FIRES, 0)] - runs[("manual", "fires", 0, 0)]) / FIRES,
              fire_budget, "instructions per fire")
    if statistics_budget is not None:
        with_statistics = (runs[("manual", "fires", FIRES, 0)] - runs[("manual", "fires", 0, 0)]) / FIRES
        without = (runs[("manual", "fires-nostats", FIRES, 0)] - runs[("manual", "fires-nostats", 0, 0)]) / FIRES
        check("statistics' cost on the Manual fire path", with_statistics - without, statistics_budget, "instructions per fire")
    for backend, budget in loop_fire_budgets.items():
        check(f"{backend} loop fire", (runs[(backend, "loop-fires", LOOP_FIRES, 0)] - runs[(backend, "loop-fires", 0, 0)]) / LOOP_FIRES,
              budget, "instructions per fire")
    if problems:
        print("instruction-budget: over budget: " + "; ".join(problems), file=sys.stderr)
        sys.exit(1)

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
