#!/usr/bin/python3
"""Tables of mo_search_bench's figures next to Optuna's (bench/search/mo_run.sh).

    report_mo.py synthetic RAYD_JSON OPTUNA_JSON
    report_mo.py hvcheck OPTUNA_SAMPLE_JSON RAYD_HV_JSON
    report_mo.py replay RAYD_JSON OPTUNA_JSON

synthetic: `mo_search_bench synthetic --json` and optuna_mo_peer.py; replay: `mo_search_bench
replay` and optuna_mo_replay_peer.py; hvcheck: optuna_mo_peer.py --sample and `mo_search_bench
hv` on it. Medians over seeds; each side's seeds are its own (the runs are not paired).
"""
import json
import math
import sys

ARMS = ("nsga2", "mo_tpe", "random")
LABEL = {"nsga2": "NSGA-II", "mo_tpe": "MO-TPE", "random": "random"}


def median(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return math.nan
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def quartiles(values):
    values = sorted(values)
    return values[len(values) // 4], values[(3 * len(values)) // 4]


def p_value(a, b):
    """Mann-Whitney's two-sided p for samples a and b ("" without scipy)."""
    try:
        from scipy.stats import mannwhitneyu
    except ImportError:
        return ""
    return f", Mann-Whitney p = {mannwhitneyu(a, b, alternative='two-sided').pvalue:.2f}"


def fmt(x, width=9, digits=4):
    return f"{'-':>{width}}" if x is None or math.isnan(x) else f"{x:{width}.{digits}f}"


def synthetic(rayd, optuna):
    print(f"median over {rayd['seeds']} seeds (Optuna: {optuna['seeds']}) of the hypervolume of "
          f"the first N evaluations' front (higher is better); NSGA-II population "
          f"{rayd['population']} (Optuna: {optuna['population']})")
    arms = [a for a in ARMS if any(a in p["arms"] for p in rayd["problems"].values())
            or any(a in p["arms"] for p in optuna["problems"].values())]
    for side, out in (("rayd", rayd), ("Optuna", optuna)):
        for a in arms:
            runs = next(iter(out["problems"].values()))["arms"].get(a)
            if runs and (len(next(iter(runs.values()))) != out["seeds"]
                         or len(runs) != len(rayd["checkpoints"])):
                print(f"  {side} {LABEL[a]}: {len(next(iter(runs.values())))} seeds, N up to "
                      f"{max(map(int, runs))} (see optuna_mo_peer.py)")
    head = "".join(f" {'rayd ' + LABEL[a]:>14} {'Optuna ' + LABEL[a]:>14}" for a in arms)
    print(f"{'problem':8} {'n':>3} {'reference':>15} {'N':>4}{head} {'optimum':>9}")
    met, total = {}, {}
    order = ("zdt1", "zdt2", "zdt3", "dtlz2")
    names = sorted(rayd["problems"], key=lambda n: order.index(n) if n in order else len(order))
    for name in names:
        problem = rayd["problems"][name]
        peer = optuna["problems"].get(name, {"arms": {}})
        ref = "(" + ", ".join(f"{r:g}" for r in problem["reference"]) + ")"
        for n in map(str, rayd["checkpoints"]):
            cells = ""
            values = {}
            for a in arms:
                r = median(problem["arms"][a][n]) if a in problem["arms"] else math.nan
                o = median(peer["arms"][a][n]) if a in peer["arms"] and n in peer["arms"][a] \
                    else math.nan
                values[a] = (r, o)
                cells += f" {fmt(r, 14)} {fmt(o, 14)}"
            print(f"{name:8} {problem['num_vars']:3} {ref:>15} {n:>4}{cells} "
                  f"{fmt(problem['optimum'])}")
            for a in ("nsga2", "mo_tpe"):
                r, o = values.get(a, (math.nan, math.nan))
                if not math.isnan(r) and not math.isnan(o):
                    total[a] = total.get(a, 0) + 1
                    met[a] = met.get(a, 0) + (r >= o)
    for a in total:
        print(f"rayd {LABEL[a]}'s median >= Optuna {LABEL[a]}'s: {met[a]} of {total[a]} "
              f"(problem, N) cells")
    n = str(max(rayd["checkpoints"]))
    for name in names:
        r = rayd["problems"][name]["arms"].get("nsga2", {}).get(n)
        o = optuna["problems"].get(name, {"arms": {}})["arms"].get("nsga2", {}).get(n)
        if r and o:
            print(f"  {name} N={n}: rayd NSGA-II quartiles {fmt(quartiles(r)[0], 0)}.."
                  f"{fmt(quartiles(r)[1], 0)}, Optuna's {fmt(quartiles(o)[0], 0)}.."
                  f"{fmt(quartiles(o)[1], 0)}{p_value(r, o)}")


def hvcheck(sample, rayd_hv):
    print("hypervolume of the same points (Optuna's NSGA-II, seed 1, every evaluation), "
          "Optuna's WFG against rayd's Hypervolume")
    worst = 0.0
    for case, r in zip(sample, rayd_hv):
        o = case["optuna_hv"]
        rel = abs(r - o) / max(abs(o), 1e-300)
        worst = max(worst, rel)
        print(f"  {case['problem']:8} {len(case['points']):4} points  Optuna {o:.12g}  "
              f"rayd {r:.12g}  relative difference {rel:.1e}")
    print(f"  agree: {'yes' if worst < 1e-9 else 'NO'} (largest relative difference {worst:.1e})")


def hv_at(run, budget, index):
    """The hypervolume after `budget` epochs; index 1: every trial's last result, 2: full."""
    value = 0.0
    for entry in run["trace"]:
        if entry[0] > budget:
            break
        value = entry[index]
    return value


def epochs_to(run, target, index):
    for entry in run["trace"]:
        if entry[index] >= target - 1e-12:
            return entry[0]
    return math.inf


def replay(rayd, optuna):
    for key in ("reference", "optimum", "epochs_per_curve", "curves"):
        a, b = rayd[key], optuna[key]
        same = (all(abs(x - y) < 1e-9 for x, y in zip(a, b)) if isinstance(a, list)
                else abs(a - b) < 1e-9)
        if not same:
            print(f"WARNING: rayd's {key} {a} differs from Optuna's {b}")
    epochs = rayd["epochs_per_curve"]
    optimum = rayd["optimum"]
    full = rayd["budget"]
    seeds = len(next(iter(rayd["arms"].values())))
    print(f"{rayd['curves']} recorded configs x {epochs} epochs; points (1 - accuracy, "
          f"log10 params), reference ({rayd['reference'][0]:.4f}, {rayd['reference'][1]:.4f}) "
          f"(the table's best front's nadir + 10% of its range); that front's hypervolume "
          f"{optimum:.5f}; {seeds} seeds (Optuna: "
          f"{len(next(iter(optuna['arms'].values())))}); NSGA-II population "
          f"{rayd['population']}; one trial at a time; rayd through {rayd.get('driver', '?')}")
    plain = [a for a in rayd["arms"] if "mo_asha" not in a]
    rows = ([(f"rayd {a}", rayd["arms"][a]) for a in plain] +
            [(f"Optuna {a}", optuna["arms"][a]) for a in optuna["arms"]] +
            [(f"rayd {a}", rayd["arms"][a]) for a in rayd["arms"] if a not in plain])
    budgets = sorted({n * epochs for n in (5, 10, 20, rayd["trials"]) if n <= rayd["trials"]})

    print(f"\nwhat each sweep tried in {full} epochs (median): trials, distinct configs, trials "
          f"trained all {epochs} epochs, distinct configs among them")
    for label, runs in rows:
        cells = "".join(f" {median([r.get(k, math.nan) for r in runs]):6.0f}"
                        for k in ("trials", "distinct", "full_trials", "distinct_full"))
        print(f"  {label:26}{cells}")

    for index, what in ((1, "every trial's last result (what the sweep's Pareto front reports)"),
                        (2, "the trials trained all epochs only")):
        print(f"\nhypervolume / the table's best by epochs spent (median); front of {what}")
        head = "".join(f" {f'{b} ep (N={b // epochs})':>15}" for b in budgets)
        print(f"  {'arm':26}{head}")
        for label, runs in rows:
            cells = "".join(f" {fmt(median([hv_at(r, b, index) for r in runs]) / optimum, 15)}"
                            for b in budgets)
            print(f"  {label:26}{cells}")

    targets = {a: median([r["final"][0] for r in runs]) for a, runs in optuna["arms"].items()}
    best_arm = max(targets, key=targets.get)
    print(f"\nepochs until the front reaches Optuna's final hypervolume (its median after "
          f"{rayd['trials']} full evaluations = {full} epochs), per seed (median, ratio to "
          f"{full}, seeds that reached it)")
    print("  targets: " + ", ".join(f"Optuna {a} {t / optimum:.4f}" for a, t in targets.items()) +
          " (of the best)")
    for index, what in ((1, "every trial's last result"), (2, "trials trained all epochs")):
        print(f"  front of {what}:")
        print(f"    {'arm':26}" + "".join(f" {'-> Optuna ' + a:>24}" for a in targets))
        for label, runs in rows:
            cells = ""
            for a, target in targets.items():
                spent = [epochs_to(r, target, index) for r in runs]
                m = median(spent)
                reached = sum(not math.isinf(x) for x in spent)
                shown = "never" if math.isinf(m) else f"{m:.0f} {m / full:.2f}x"
                cells += f" {shown + f' ({reached}/{len(spent)})':>24}"
            print(f"    {label:26}{cells}")

    print("\ntargets")
    final = {label: median([r["final"][0] for r in runs]) for label, runs in rows}
    for arm in ("nsga2", "mo_tpe"):
        r, o = final.get(f"rayd {arm}"), final.get(f"Optuna {arm}")
        if r is not None and o is not None:
            p = p_value([x["final"][0] for x in rayd["arms"][arm]],
                        [x["final"][0] for x in optuna["arms"][arm]])
            print(f"  rayd {arm} >= Optuna {arm} after {rayd['trials']} full evaluations: "
                  f"{'yes' if r >= o else 'NO'} ({r / optimum:.4f} vs {o / optimum:.4f}{p})")
    target = targets[best_arm]
    for label, runs in rows:
        if "mo_asha" not in label:
            continue
        for index, what in ((1, "last results"), (2, "full trials")):
            m = median([epochs_to(r, target, index) for r in runs])
            verdict = "yes" if m <= 0.5 * full else "NO"
            shown = "never" if math.isinf(m) else f"{m / full:.2f}x"
            print(f"  {label} reaches Optuna {best_arm}'s {target / optimum:.4f} ({what}) in <= "
                  f"0.5x {full} epochs: {verdict} ({shown})")


def main():
    mode = sys.argv[1]
    loaded = [json.load(open(path)) for path in sys.argv[2:]]
    {"synthetic": synthetic, "hvcheck": hvcheck, "replay": replay}[mode](*loaded)


if __name__ == "__main__":
    main()
