#!/usr/bin/python3
"""Optuna 3.1 (Debian's python3-optuna) on the multi-objective problems of mo_search_bench
(mo_objectives.h: ZDT1-3, DTLZ2), printed as one JSON object in the same layout as
`mo_search_bench synthetic --json`.

Arms, one trial at a time (study.optimize with n_jobs=1), seeds 1..--seeds (from --first-seed
instead of 1, for another sample to pool with an earlier run's):
  nsga2    NSGAIISampler(population_size=--population, seed): Optuna's defaults otherwise
           (uniform crossover 0.9, swapping 0.5, mutation 1/params), as rayd's Nsga2Config
  mo_tpe   TPESampler(seed) on several objectives (MOTPE: Optuna's defaults, 10 random trials);
           seeds 1..--tpe-seeds and at most --tpe-max evaluations: Optuna 3.1's MOTPE spends
           most of a second per proposal beyond ~150 trials (its hypervolume subset selection
           runs once per parameter), 4-8 minutes per run of 400 on these problems
  random   RandomSampler(seed)

The hypervolume is Optuna's own exact one (optuna._hypervolume.WFG) of the Pareto front of the
first N trials up to the problem's reference point. --sample FILE also writes, per problem, the
points of the first seed's first run and their hypervolume, for mo_search_bench hv to check that
rayd's computation agrees.

    bench/search/optuna_mo_peer.py [--seeds 10] [--checkpoints 100,200,400] [--population 50]
        [--zdt-vars 30] [--dtlz-vars 12] [--arms nsga2,mo_tpe,random] [--tpe-seeds 3]
        [--tpe-max 200] [--first-seed 1] [--sample FILE]
"""
import argparse
import json
import math

import numpy as np
import optuna
from optuna._hypervolume import WFG


def zdt_g(x):
    return 1 + 9 * sum(x[1:]) / (len(x) - 1)


def zdt1(x):
    f1, g = x[0], zdt_g(x)
    return [f1, g * (1 - math.sqrt(f1 / g))]


def zdt2(x):
    f1, g = x[0], zdt_g(x)
    return [f1, g * (1 - (f1 / g) ** 2)]


def zdt3(x):
    f1, g = x[0], zdt_g(x)
    return [f1, g * (1 - math.sqrt(f1 / g) - f1 / g * math.sin(10 * math.pi * f1))]


def dtlz2(x):
    g = sum((v - 0.5) ** 2 for v in x[2:])
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b),
            (1 + g) * math.sin(a)]


def problems(zdt_vars, dtlz_vars):
    """As mo_objectives.h's MoProblems."""
    return [("zdt1", zdt_vars, zdt1, [11.0, 11.0]), ("zdt2", zdt_vars, zdt2, [11.0, 11.0]),
            ("zdt3", zdt_vars, zdt3, [11.0, 11.0]), ("dtlz2", dtlz_vars, dtlz2, [1.1, 1.1, 1.1])]


def pareto_front(points):
    """The points (minimised) no other point dominates; duplicates kept once."""
    pts = np.unique(np.asarray(points, dtype=float), axis=0)
    keep = []
    for i, p in enumerate(pts):
        dominated = np.any(np.all(pts <= p, axis=1) & np.any(pts < p, axis=1))
        if not dominated:
            keep.append(i)
    return pts[keep]


def hypervolume(points, reference):
    """Optuna's exact hypervolume of the front of `points` up to `reference`; points not
    strictly below the reference in every coordinate add nothing (as rayd's)."""
    ref = np.asarray(reference, dtype=float)
    pts = [p for p in points if np.all(np.asarray(p) < ref)]
    if not pts:
        return 0.0
    return float(WFG().compute(pareto_front(pts), ref))


def sampler_of(arm, seed, population):
    if arm == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    if arm == "mo_tpe":
        return optuna.samplers.TPESampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def run(arm, problem, seed, checkpoints, population):
    name, n, f, reference = problem
    study = optuna.create_study(directions=["minimize"] * len(reference),
                                sampler=sampler_of(arm, seed, population))
    points = []

    def objective(trial):
        values = f([trial.suggest_float(f"x{i}", 0, 1) for i in range(n)])
        points.append(values)
        return values

    out = []
    done = 0
    for checkpoint in checkpoints:
        study.optimize(objective, n_trials=checkpoint - done)
        done = checkpoint
        out.append(hypervolume(points, reference))
    return out, points


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--checkpoints", default="100,200,400")
    parser.add_argument("--population", type=int, default=50)
    parser.add_argument("--zdt-vars", type=int, default=30)
    parser.add_argument("--dtlz-vars", type=int, default=12)
    parser.add_argument("--arms", default="nsga2,mo_tpe,random")
    parser.add_argument("--tpe-seeds", type=int, default=3)
    parser.add_argument("--tpe-max", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=1,
                        help="seeds first-seed.. (another sample of seeds to pool with one run)")
    parser.add_argument("--sample", help="write seed 1's points and hypervolumes here")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    checkpoints = sorted(int(c) for c in args.checkpoints.split(","))
    out = {"seeds": args.seeds, "first_seed": args.first_seed, "checkpoints": checkpoints,
           "population": args.population,
           "problems": {}}
    sample = []
    for problem in problems(args.zdt_vars, args.dtlz_vars):
        name, n, _, reference = problem
        entry = out["problems"][name] = {"num_vars": n, "reference": reference, "arms": {}}
        for arm in args.arms.split(","):
            seeds, upto = args.seeds, checkpoints
            if arm == "mo_tpe":
                seeds, upto = args.tpe_seeds, [c for c in checkpoints if c <= args.tpe_max]
            per_checkpoint = [[] for _ in upto]
            for seed in range(args.first_seed, args.first_seed + seeds):
                hv, points = run(arm, problem, seed, upto, args.population)
                for k, value in enumerate(hv):
                    per_checkpoint[k].append(value)
                if seed == args.first_seed and arm == "nsga2":
                    sample.append({"problem": name, "reference": reference, "points": points,
                                   "optuna_hv": hv[-1]})
            entry["arms"][arm] = {str(c): v for c, v in zip(upto, per_checkpoint)}
    if args.sample:
        with open(args.sample, "w") as f:
            json.dump(sample, f)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
