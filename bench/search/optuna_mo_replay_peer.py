#!/usr/bin/python3
"""Optuna 3.1 (Debian's python3-optuna) on the same recorded curves as `mo_search_bench replay`
(accuracy, maximised, against model size, minimised), printed as one JSON object in the same
layout.

Arms, one trial at a time (study.optimize with n_jobs=1), --trials trials each, every trial
playing its config's whole curve (Optuna's multi-objective studies cannot prune: trial.report
is for one objective only), seeds 1..--seeds:
  nsga2    NSGAIISampler(population_size=--population, seed)
  mo_tpe   TPESampler(seed) on two objectives (MOTPE, Optuna's defaults)
  random   RandomSampler(seed)

Each key the table varies is a categorical parameter of its values. The hypervolume, as the
rayd bench computes it (mo_replay.cc): of every trial's last result so far as points
(1 - accuracy, log10(size)), and of the trials that played their whole curve ("full"), up to
the table's best front's nadir plus a tenth of its range; by Optuna's exact WFG.

    bench/search/optuna_mo_replay_peer.py --curves bench/search/data/fashion_mo_curves.csv
        [--seeds 20] [--trials 40] [--population 10]
"""
import argparse
import csv
import json
import math

import optuna

from optuna_mo_peer import hypervolume, pareto_front, sampler_of


def cell(text):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def load(path, accuracy, size):
    """{config tuple: [point per epoch]}, the parameter names, each one's values."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    keys = [k for k in rows[0] if k.startswith("config/")]
    by_trial = {}  # trial_id -> (config, points)
    for row in rows:
        config = tuple(cell(row[k]) for k in keys)
        point = None
        if row.get(accuracy) and row.get(size) and float(row[size]) > 0:
            point = (1 - float(row[accuracy]), math.log10(float(row[size])))
        by_trial.setdefault(row["trial_id"], (config, []))[1].append(point)
    curves = {}  # the first curve recorded for each config
    for config, points in by_trial.values():
        curves.setdefault(config, points)
    names = [k[len("config/"):] for k in keys]
    values = [sorted({c[i] for c in curves}) for i in range(len(names))]
    return curves, names, values


def reference_of(curves):
    finals = [c[-1] for c in curves.values() if c and c[-1] is not None]
    front = pareto_front(finals)
    reference = []
    for k in range(2):
        lo, hi = front[:, k].min(), front[:, k].max()
        reference.append(float(hi + 0.1 * (hi - lo if hi > lo else 1)))
    return reference, hypervolume(finals, reference)


def run(arm, curves, names, values, reference, longest, seed, trials, population):
    last, full = [], []
    trace = []
    state = {"epochs": 0, "hv": 0.0, "hv_full": 0.0}

    def objective(trial):
        config = tuple(trial.suggest_categorical(n, v) if len(v) > 1 else v[0]
                       for n, v in zip(names, values))
        mine = None
        point = None
        for place, point in enumerate(curves[config]):
            state["epochs"] += 1
            if point is None:
                continue
            if mine is None:
                mine = len(last)
                last.append(point)
            else:
                last[mine] = point
            if place + 1 == longest:
                full.append(point)
            hv, hv_full = hypervolume(last, reference), hypervolume(full, reference)
            if hv != state["hv"] or hv_full != state["hv_full"]:
                state["hv"], state["hv_full"] = hv, hv_full
                trace.append([state["epochs"], hv, hv_full])
        # The objectives as the study sees them: accuracy and size.
        return 1 - point[0], 10 ** point[1]

    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=sampler_of(arm, seed, population))
    study.optimize(objective, n_trials=trials)
    distinct = len({tuple(sorted(t.params.items())) for t in study.trials})
    return {"seed": seed, "trace": trace, "epochs": state["epochs"], "trials": trials,
            "full_trials": len(full), "distinct": distinct, "distinct_full": distinct,
            "final": [state["hv"], state["hv_full"]]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--curves", required=True)
    parser.add_argument("--accuracy", default="val_accuracy")
    parser.add_argument("--size", default="params")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--population", type=int, default=10)
    parser.add_argument("--arms", default="nsga2,mo_tpe,random")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    curves, names, values = load(args.curves, args.accuracy, args.size)
    longest = max(len(c) for c in curves.values())
    reference, optimum = reference_of(curves)
    out = {"curves": len(curves), "epochs_per_curve": longest, "reference": reference,
           "optimum": optimum, "trials": args.trials, "population": args.population,
           "budget": args.trials * longest, "arms": {}}
    for arm in args.arms.split(","):
        out["arms"][arm] = [run(arm, curves, names, values, reference, longest, seed,
                                args.trials, args.population)
                            for seed in range(1, args.seeds + 1)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
