#!/usr/bin/python3
"""The peer of bench/tune_bench (build/bench/tune_bench): Optuna's pruners on the same objective.

Measures on this machine, with Debian's python3-optuna:

1. Budget vs best. 27 trials, random search (RandomSampler(seed=S), so the comparison is about
   the pruner, not the sampler), params x ~ U(0, 6) and lr ~ choice [0.05, 0.1, 0.2]. At
   iteration i = 1..9 a trial reports

       loss = ((x - 3)^2 + (0 + 1)^2 + 0.1) / (1 + lr * i)

   (tune_bench's objective with y = 0), minimised, with trial.report(loss, i) and
   trial.should_prune(). Pruners: none (NopPruner, = FIFO), SuccessiveHalvingPruner(min_resource=1,
   reduction_factor=3, min_early_stopping_rate=0) and HyperbandPruner(min_resource=1,
   max_resource=9, reduction_factor=3). Per pruner, means over seeds 0..4 of: budget (iterations
   run over all trials), best (study.best_value: Optuna counts only COMPLETE trials there, even
   though a pruned trial's value is its last intermediate), best_full (best among trials that ran
   all 9 iterations; the same set as COMPLETE here), best_any (best over all trials, pruned ones
   at their last intermediate) and seconds (wall time of study.optimize).
2. Per-trial overhead. --trials (default 10,000) trials of an instant objective (returns x**2
   after one trial.report + should_prune, SuccessiveHalvingPruner, RandomSampler, in-memory
   storage, logging at WARNING): trials/s and µs per trial.
3. Results/s. --reports (default 10,000) trial.report calls in one trial with no pruner.

Run it with Debian's interpreter:

    /usr/bin/python3 bench/peers/optuna_sweep.py [--trials 10000] [--reports 10000] [--json]

Prints an aligned table (or one JSON object with --json).
"""

import argparse
import json
import time

import optuna

N_TRIALS = 27
MAX_ITERS = 9
SEEDS = range(5)
LRS = [0.05, 0.1, 0.2]


def pruners():
    return {
        "fifo": optuna.pruners.NopPruner,
        "sha": lambda: optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=3, min_early_stopping_rate=0),
        "hyperband": lambda: optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=MAX_ITERS, reduction_factor=3),
    }


def sweep_once(make_pruner, seed):
    """Runs one 27-trial study; returns (budget, best, best_full, best_any, seconds)."""
    iters = [0]
    finals = []

    def objective(trial):
        x = trial.suggest_float("x", 0.0, 6.0)
        lr = trial.suggest_categorical("lr", LRS)
        loss = None
        for i in range(1, MAX_ITERS + 1):
            loss = ((x - 3.0) ** 2 + (0.0 + 1.0) ** 2 + 0.1) / (1.0 + lr * i)
            iters[0] += 1
            trial.report(loss, i)
            if trial.should_prune():
                raise optuna.TrialPruned()
        finals.append(loss)
        return loss

    # HyperbandPruner picks a trial's bracket from a hash of the study name and trial number, so
    # the name is fixed too; an auto-generated one makes its budget vary run to run.
    study = optuna.create_study(study_name=f"sweep-{seed}", direction="minimize",
                                sampler=optuna.samplers.RandomSampler(seed=seed),
                                pruner=make_pruner())
    start = time.perf_counter()
    study.optimize(objective, n_trials=N_TRIALS)
    seconds = time.perf_counter() - start
    values = [t.value for t in study.trials if t.value is not None]
    return iters[0], study.best_value, min(finals), min(values), seconds


def sweep():
    out = {}
    for name, make_pruner in pruners().items():
        runs = [sweep_once(make_pruner, seed) for seed in SEEDS]
        mean = [sum(column) / len(runs) for column in zip(*runs)]
        out[name] = dict(zip(["budget", "best", "best_full", "best_any", "seconds"], mean))
    return out


def trial_overhead(n):
    def objective(trial):
        x = trial.suggest_float("x", -10.0, 10.0)
        trial.report(x * x, 1)
        trial.should_prune()
        return x * x

    study = optuna.create_study(direction="minimize",
                                sampler=optuna.samplers.RandomSampler(seed=0),
                                pruner=optuna.pruners.SuccessiveHalvingPruner())
    start = time.perf_counter()
    study.optimize(objective, n_trials=n)
    return time.perf_counter() - start


def report_rate(n):
    elapsed = [0.0]

    def objective(trial):
        start = time.perf_counter()
        for i in range(n):
            trial.report(float(i), i)
        elapsed[0] = time.perf_counter() - start
        return 0.0

    study = optuna.create_study(pruner=optuna.pruners.NopPruner())
    study.optimize(objective, n_trials=1)
    return elapsed[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10000)
    parser.add_argument("--reports", type=int, default=10000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    figures = {"optuna_version": optuna.__version__, "sweep": sweep()}
    seconds = trial_overhead(args.trials)
    figures.update(trials=args.trials, trials_per_s=args.trials / seconds,
                   us_per_trial=seconds / args.trials * 1e6)
    seconds = report_rate(args.reports)
    figures.update(reports=args.reports, reports_per_s=args.reports / seconds)

    if args.json:
        print(json.dumps(figures))
        return
    print(f"optuna {figures['optuna_version']}: {N_TRIALS} trials x {MAX_ITERS} iterations, "
          f"RandomSampler, means over seeds 0..{len(SEEDS) - 1}")
    print(f"{'pruner':<10} {'budget':>7} {'best':>8} {'best_full':>9} {'best_any':>8} "
          f"{'seconds':>8}")
    for name, row in figures["sweep"].items():
        print(f"{name:<10} {row['budget']:>7.1f} {row['best']:>8.4f} {row['best_full']:>9.4f} "
              f"{row['best_any']:>8.4f} {row['seconds']:>8.3f}")
    print(f"{'trials/s':<13} {figures['trials_per_s']:>10.1f}  ({args.trials} trials)")
    print(f"{'us/trial':<13} {figures['us_per_trial']:>10.1f}")
    print(f"{'reports/s':<13} {figures['reports_per_s']:>10.1f}  ({args.reports} in one trial)")


if __name__ == "__main__":
    main()
