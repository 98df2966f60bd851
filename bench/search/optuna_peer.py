#!/usr/bin/python3
"""Optuna's TPESampler and RandomSampler on the functions of bench/search (objectives.h), the
same way bench/search/main.cc runs rayd's: the median over seeds of the best value after 25, 50
and 100 trials, one trial at a time. Prints one JSON object. Needs Debian's python3-optuna.

    /usr/bin/python3 bench/search/optuna_peer.py [--seeds 20] [--startup 10]
"""
import argparse
import json
import math
import statistics

import optuna


def branin(x1, x2):
    a, b, c, r, s, t = 1, 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return a * (x2 - b * x1 * x1 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s


ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
     [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
     [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
     [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(x):
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6)))
                for i in range(4))


PROBLEMS = {
    "branin": lambda t: branin(t.suggest_float("x1", -5, 10), t.suggest_float("x2", 0, 15)),
    "hartmann6": lambda t: hartmann6([t.suggest_float(f"x{i}", 0, 1) for i in range(6)]),
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--startup", type=int, default=10)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    checkpoints = [25, 50, 100]
    out = {}
    for name, objective in PROBLEMS.items():
        for label in ("tpe", "random"):
            per = {k: [] for k in checkpoints}
            for seed in range(1, args.seeds + 1):
                sampler = (optuna.samplers.TPESampler(n_startup_trials=args.startup, seed=seed)
                           if label == "tpe" else optuna.samplers.RandomSampler(seed=seed))
                study = optuna.create_study(sampler=sampler)
                best = math.inf
                for n in range(1, checkpoints[-1] + 1):
                    trial = study.ask()
                    value = objective(trial)
                    study.tell(trial, value)
                    best = min(best, value)
                    if n in per:
                        per[n].append(best)
            out.setdefault(name, {})[label] = {str(k): statistics.median(v) for k, v in per.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
