"""The markdown tables and goal checks of benchmarks/bench_accuracy.py: metrics per set and row, worst seeds and
rare codes, evidence, what each part of the fused model contributes, and each issue's goals with its numbers."""

from __future__ import annotations

import platform
import statistics
import time
from datetime import datetime, timezone

from benchmarks.accuracy_sets import ALL_CODES, ISSUE_SCALES, MAP_WITHOUT, N_BOOT, PROXIES, ROW_KIND, SEEDS_CAP

# Seeds agree (issue 35): on these sets the best seed's test micro-F1 is at most this far above the worst's.
SPREAD_GOAL = 0.05
SPREAD_SETS = ("bc5cdr-disease-mesh",)
METRICS = (("f1_micro", "micro-F1"), ("f1_macro", "macro-F1"), ("auc_macro", "macro-AUC"),
           ("auc_micro", "micro-AUC"), ("prec_at_5", "P@5"), ("prec_at_8", "P@8"))


def parts_table(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """What each part of the fused model contributes per band (test, mean over seeds)."""
    keys = [("f1_micro", "micro-F1"), ("auc_macro", "macro-AUC"), ("prec_at_8", "P@8"), ("f1_macro", "macro-F1"),
            ("rare<10_auc", "<10 notes macro-AUC"), ("rare<10_f1", "<10 notes macro-F1"), ("1-2_auc", "1-2 AUC"),
            ("3-10_auc", "3-10 AUC"), ("11-50_auc", "11-50 AUC"), (">50_auc", ">50 AUC")]
    lines = ["| dataset | runs | scored with | " + " | ".join(n for _, n in keys) + " |",
             "|---|---|---|" + "---|" * len(keys)]
    for (dataset, name), rows in results.items():
        have = [r["parts"] for r in rows if r.get("parts")]
        if ROW_KIND.get(name) != "fused" or not have:
            continue
        for part in have[0]:
            cells = []
            for k, _ in keys:
                vals = [p[part][k] for p in have if k in p[part]]
                cells.append(f"{statistics.mean(vals):.4f}" if vals else "-")
            lines.append(f"| {dataset} | {len(have)} | {part} | " + " | ".join(cells) + " |")
    if len(lines) == 2:
        return []
    return ["What each part of the fused model contributes (test, mean over its seeds; the same checkpoint scored "
            "with one part's term set to 0, threshold and per-code shifts kept). Bands: training notes per code; a "
            "band counts its codes with a gold test note.", "", *lines, ""]


ISSUE41_EVIDENCE = {"bc5cdr-disease-mesh": (0.87, 0.67), "bc5cdr-disease-mesh-all": (0.85, 0.63)}
# The leam row's seed means as BENCHMARKS.md held them before #41 (e8b22bc), for a call that does not rerun the leam
# row: #41's bars for the fused model are relative to it.
LEAM_BEFORE = {"bc5cdr-disease-mesh": {"f1_micro": 0.7062, "prec_at_8": 0.2182, "f1_macro": 0.7035},
               "bc5cdr-disease-mesh-all": {"f1_micro": 0.5202, "prec_at_8": 0.2442, "f1_macro": 0.1385},
               "ncbi-disease-mesh": {"f1_micro": 0.8092, "prec_at_8": 0.2073, "f1_macro": 0.5451},
               "ncbi-disease-mesh-all": {"f1_micro": 0.6167, "prec_at_8": 0.2475, "f1_macro": 0.0785},
               "cmc2007-radiology-icd9": {"f1_micro": 0.7710, "prec_at_8": 0.1486, "f1_macro": 0.3827}}


def issue41_goals(results: dict[tuple[str, str], list[dict]], evidence: dict | None = None) -> list[str]:
    """#41's goals for the fused row, each with its numbers: every code (the NAME-all sets) against tfidf-lr and the
    previous default (the leam row, seed mean); top 50 against the leam row; evidence on bc5cdr; time."""
    out = []
    for (d, name), rows in results.items():
        if ROW_KIND.get(name) != "fused" or (d, "tfidf-lr") not in results:
            continue
        lr = results[(d, "tfidf-lr")][0]
        leam = results.get((d, "leam")) or []
        before = LEAM_BEFORE.get(d) if not leam else None
        f1 = [r["f1_micro"] for r in rows]

        def mean_of(key: str) -> float | None:
            if leam:
                return statistics.mean(r[key] for r in leam)
            return before[key] if before else None

        checks: list[tuple[str, float, float, bool]] = []   # (what, got, bar, got >= bar is met)
        if d in ALL_CODES:
            p8_bar = max(v for v in (mean_of("prec_at_8"), lr["prec_at_8"]) if v is not None) + 0.02
            mf1_bar = 1.5 * max(v for v in (mean_of("f1_macro"), lr["f1_macro"]) if v is not None)
            checks += [("worst micro-F1", min(f1), lr["f1_micro"] + 0.08, True),
                       ("worst P@8", min(r["prec_at_8"] for r in rows), p8_bar, True),
                       ("worst macro-AUC", min(r["auc_macro"] for r in rows), lr["auc_macro"] + 0.01, True),
                       ("worst macro-F1", min(r["f1_macro"] for r in rows), mf1_bar, True)]
            if len(rows) > 1:
                checks.append(("best - worst micro-F1", max(f1) - min(f1), 0.02, False))
            if d == "bc5cdr-disease-mesh-all":
                checks.append(("slowest train s", max(r["seconds"] for r in rows), 150.0, False))
        else:
            if leam or before:
                checks.append(("worst micro-F1", min(f1), mean_of("f1_micro") - 0.01, True))
            if len(rows) > 1:
                checks.append(("best - worst micro-F1", max(f1) - min(f1), 0.03, False))
        if evidence and d in ISSUE41_EVIDENCE and (d, name) in evidence:
            reps = [r["model"] for r in evidence[(d, name)]]
            for key, bar in zip(("hit_at_1", "token_f1"), ISSUE41_EVIDENCE[d]):
                checks.append((f"worst evidence {key.replace('_at_', '@').replace('token_', 'word ')}",
                               min(x[key] for x in reps), bar, True))
        parts = [f"{what} {got:.4f} (goal {'>=' if up else '<='} {bar:.4f}: "
                 f"{'met' if (got >= bar - 1e-12 if up else got <= bar + 1e-12) else 'NOT met'})"
                 for what, got, bar, up in checks]
        source = " (leam: BENCHMARKS.md's row before #41)" if before else ""
        out.append(f"- {d}, {name}, {len(rows)} seed(s){source}: " + "; ".join(parts))
    return out


def _cell(values: list[float], digits: int = 4) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def table(results: dict[tuple[str, str], list[dict]]) -> str:
    head = "| dataset | model | runs | " + " | ".join(name for _, name in METRICS) + " | train s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (dataset, model), rows in results.items():
        cells = [_cell([r[k] for r in rows]) for k, _ in METRICS]
        secs = _cell([r["seconds"] for r in rows], 0)
        lines.append(f"| {dataset} | {model} | {len(rows)} | " + " | ".join(cells) + f" | {secs} |")
    return "\n".join(lines)


def shared_task_table(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """The shared tasks' metrics per set and row (docs/metrics.md): MAP, MAP without the set's MAP_WITHOUT codes and
    the span-and-code P/R/F1, seed mean ± sd and the worst seed; '-' where a figure is absent (no evidence spans, a
    model that shows none, or no code left out)."""
    keys = (("map", "MAP"), ("map_without", "MAP without"), ("span_precision", "span-and-code P"),
            ("span_recall", "span-and-code R"), ("span_f1", "span-and-code F1"))
    lines = ["| dataset | model | runs | " + " | ".join(n for _, n in keys) + " | MAP worst | span-and-code F1 worst |",
             "|---|---|---|" + "---|" * (len(keys) + 2)]
    for (dataset, model), rows in results.items():
        if not any(r.get("map") is not None for r in rows):
            continue
        cells = [_mean([r.get(k) for r in rows]) for k, _ in keys]
        lines.append(f"| {dataset} | {model} | {len(rows)} | " + " | ".join(cells)
                     + f" | {_worst([r.get('map') for r in rows])} | {_worst([r.get('span_f1') for r in rows])} |")
    if len(lines) == 2:
        return []
    left_out = "; ".join(f"{d}: without {', '.join(c)}" for d, c in MAP_WITHOUT.items())
    return ["The shared tasks' metrics (test; docs/metrics.md): MAP ranks each note's codes by score to depth 1,000, "
            "a gold code outside the model's codes never retrieved (CANTEMIST-CODING, CodiEsp-D/P); MAP without "
            f"({left_out}) leaves those codes out of ranking and gold; span-and-code F1 counts a predicted code only "
            "when one of its 5 shown spans holds a coder's reference of it, 10 characters of slack each side "
            "(CodiEsp-X), over (note, code) pairs.", "", *lines, ""]


def _worst(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return f"{min(vals):.4f}" if vals else "-"


def _mean(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return _cell(vals) if vals else "-"


def robustness_table(results: dict[tuple[str, str], list[dict]]) -> str:
    """Worst seed, rare-code slice and how each run ended, per set and model."""
    head = ("| dataset | model | micro-F1 worst | macro-AUC worst | rare codes in test | rare "
            "macro-AUC | rare macro-AUC "
            "worst | rare macro-F1 | frequent macro-AUC | frequent macro-F1 | epochs | stopped "
            "by the cap while improving "
            "| last loss above its lowest | W1 sum, min-max (seeds <= 0) | W1 sum after epochs 1, 2, 5, end; "
            "a_k end (the seed whose W1 ends lowest) | test code pairs outside the model's codes |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (dataset, model), rows in results.items():
        leam = model != "tfidf-lr"
        lines.append(" | ".join([
            f"| {dataset}", model, _worst([r["f1_micro"] for r in rows]), _worst([r["auc_macro"] for r in rows]),
            str(rows[0]["rare_n"]), _mean([r["rare_auc_macro"] for r in rows]),
                                 _worst([r["rare_auc_macro"] for r in rows]),
            _mean([r["rare_f1_macro"] for r in rows]), _mean([r["frequent_auc_macro"] for r in rows]),
            _mean([r["frequent_f1_macro"] for r in rows]),
            (f"{min(r['epochs'] for r in rows)}-{max(r['epochs'] for r in rows)}" if leam else "-"),
            (f"{sum(r['at_cap_improving'] for r in rows)} of {len(rows)}" if leam else "-"),
            (f"max {100 * max(r['loss_rise'] for r in rows):.0f}%" if leam else "-"),
            (f"{min(r['w1_sum'] for r in rows):+.2f} to {max(r['w1_sum'] for r in rows):+.2f} "
             f"({sum(r['w1_sum'] <= 0 for r in rows)})" if leam and all("w1_sum" in r for r in rows) else "-"),
            _w1_path(rows) if leam else "-",
            f"{100 * rows[0]['unseen_share']:.0f}%" if "unseen_share" in rows[0] else "-",
        ]) + " |")
    return "\n".join(lines)


def _w1_path(rows: list[dict]) -> str:
    """The window's path on the seed whose W1 ends lowest: the collapse shows there first."""
    rows = [r for r in rows if r.get("w1_path")]
    if not rows:
        return "-"
    r = min(rows, key=lambda r: r["w1_path"][-1])
    a = f"; a {r['a_end']:.2f}" if r.get("a_end") is not None else ""
    return " / ".join(f"{w:+.1f}" for w in r["w1_path"]) + a


def goals(results: dict[tuple[str, str], list[dict]], datasets: list[str]) -> list[str]:
    """The accuracy issue's goals, each with its numbers and whether it holds."""
    out = []
    for (d, name), leam in results.items():
        lr = results[(d, "tfidf-lr")][0]
        f1 = [r["f1_micro"] for r in leam]
        if name == "tfidf-lr" or d not in datasets or len(f1) < 2:
            continue
        sd, mean, worst = statistics.stdev(f1), statistics.mean(f1), min(f1)
        if d in PROXIES:
            auc = [r["auc_macro"] for r in leam]
            ok = min(f1) >= lr["f1_micro"] and min(auc) >= lr["auc_macro"]
            out.append(f"- {d}, {name} (rare-code proxy): at least tfidf-lr, seed mean and worst seed: micro-F1 mean "
                       f"{mean:.4f}, worst {worst:.4f} vs {lr['f1_micro']:.4f}; macro-AUC mean "
                       f"{statistics.mean(auc):.4f}, "
                       f"worst {min(auc):.4f} vs {lr['auc_macro']:.4f}: {'met' if ok else 'not met'}")
        ok = sd <= 0.01 and mean - worst <= 0.02
        out.append(f"- {d}, {name}: micro-F1 sd {sd:.4f} (goal <= 0.01), worst seed {mean - worst:.4f} below "
                   "the mean (goal <= 0.02): "
                   f"{'met' if ok else 'not met'}")
    return out


def issue_goals(results: dict[tuple[str, str], list[dict]]) -> list[str]:
    """Issue 25's goals on the sets of ISSUE_SCALES, per LEAM row against tfidf-lr, each with its numbers and whether
    it holds (50 codes: mean micro-F1 >= tfidf-lr + 0.10, worst >= + 0.05, worst macro-AUC >= tfidf-lr's; 300: every
    seed micro-F1 >= + 0.10, macro-AUC and P@8 >= tfidf-lr's; all: micro-F1, P@8 and macro-AUC >= tfidf-lr's, every
    seed)."""
    out = []
    for (d, name), leam in results.items():
        if name == "tfidf-lr" or d not in ISSUE_SCALES or (d, "tfidf-lr") not in results:
            continue
        lr, scale = results[(d, "tfidf-lr")][0], ISSUE_SCALES[d]
        f1 = [r["f1_micro"] for r in leam]
        auc, p8 = [r["auc_macro"] for r in leam], [r["prec_at_8"] for r in leam]
        if scale == "50":
            checks = [("mean micro-F1", statistics.mean(f1), lr["f1_micro"] + 0.10),
                      ("worst micro-F1", min(f1), lr["f1_micro"] + 0.05), ("worst macro-AUC", min(auc),
                                                                           lr["auc_macro"])]
            if d in SPREAD_SETS:   # seeds agree: best - worst <= SPREAD_GOAL, written as worst >= best - goal
                checks.append(("best - worst micro-F1 (as worst vs best - 0.05)", min(f1), max(f1) - SPREAD_GOAL))
        elif scale == "300":
            checks = [("worst micro-F1", min(f1), lr["f1_micro"] + 0.10), ("worst macro-AUC", min(auc),
                                                                           lr["auc_macro"]),
                      ("worst P@8", min(p8), lr["prec_at_8"])]
        else:
            checks = [("worst micro-F1", min(f1), lr["f1_micro"]), ("worst P@8", min(p8), lr["prec_at_8"]),
                      ("worst macro-AUC", min(auc), lr["auc_macro"])]
        parts = [f"{what} {got:.4f} (goal >= {want:.4f}: {'met' if got >= want - 1e-12 else 'NOT met'})"
                 for what, got, want in checks]
        out.append(f"- {d} ({scale} codes), {name}, {len(leam)} seed(s): " + "; ".join(parts))
    return out


EVIDENCE_GOAL = {"hit_at_1": 0.75, "token_f1": 0.55}   # issue 35, bc5cdr top 50
EVIDENCE_SETS = ("bc5cdr-disease-mesh",)


def evidence_table(ev: dict[tuple[str, str], list]) -> list[str]:
    """Hit@1, hit@5, word F1 and words shown per code (mean, worst seed), beside the random and title-word floors."""
    if not ev:
        return []
    head = ("| dataset | model | runs | correct codes with gold mentions | hit@1 (worst) | hit@5 | word P / R | "
            "word F1 (worst) | words per code | random hit@1 / F1 | title words hit@1 / F1 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (dataset, name), reps in ev.items():
        m = [r["model"] for r in reps]
        first = reps[0]

        def avg(key: str, side: list[dict] = m) -> float:
            return statistics.mean(x[key] for x in side)

        lines.append(
            f"| {dataset} | {name} | {len(reps)} | {statistics.mean(r['n_pairs'] for r in reps):.0f} | "
            f"{avg('hit_at_1'):.3f} ({min(x['hit_at_1'] for x in m):.3f}) | {avg('hit_at_k'):.3f} | "
            f"{avg('token_precision'):.3f} / {avg('token_recall'):.3f} | "
            f"{avg('token_f1'):.3f} ({min(x['token_f1'] for x in m):.3f}) | {avg('words_per_code'):.1f} | "
            f"{first['random']['hit_at_1']:.3f} / {first['random']['token_f1']:.3f} | "
            f"{first['title']['hit_at_1']:.3f} / {first['title']['token_f1']:.3f} |")
    goals = []
    for (dataset, name), reps in ev.items():
        if dataset in EVIDENCE_SETS and name == "leam":
            worst = {k: min(r["model"][k] for r in reps) for k in EVIDENCE_GOAL}
            goals.append(f"- {dataset}, {name}, evidence (worst seed): " + "; ".join(
                f"{k.replace('_at_', '@').replace('token_', 'word ')} {worst[k]:.3f} (goal >= {v}: "
                f"{'met' if worst[k] >= v else 'NOT met'})" for k, v in EVIDENCE_GOAL.items()))
    return ["Evidence against gold mentions (test split; `clinicode evaluate` reports the same figures, "
            "docs/metrics.md defines them): for every code that is gold and predicted and has a gold mention, do "
            "the spans `predict --explain 5` shows for it overlap one (hit@1: its first span; hit@5: any), and how "
            "many of their words are mention words (word precision / recall / F1)? The floors score the same pairs: "
            "random spans of the same lengths, and the code's title words found in the note.", "", *lines, "",
            *goals, ""]


def verdict(gaps: dict[tuple[str, str], dict]) -> list[str]:
    """One line per set and LEAM row: its mean minus tfidf-lr on micro-F1 and macro-AUC, with a paired-bootstrap
    interval."""
    out = []
    for (dataset, name), c in gaps.items():
        parts = []
        for key, metric in (("f1_micro", "micro-F1"), ("auc_macro", "macro-AUC")):
            b = c[key]
            parts.append(f"{metric} {b['diff']:+.4f} [{b['lo']:+.4f}, {b['hi']:+.4f}], "
                         f"below in {100 * b['p_a_below_b']:.0f}% of resamples")
        out.append(f"- {dataset}: {name} − tfidf-lr: " + "; ".join(parts))
    return out


def report_text(results: dict[tuple[str, str], list[dict]], gaps: dict[tuple[str, str], dict], evidence: dict, *,
                datasets: list[str], top_ks: dict[str, int | None], rows: dict[str, dict], seeds: int, options: dict,
                t_all: float) -> str:
    """The section of BENCHMARKS.md: what ran, the tables, every goal with its numbers, the defaults, the machine."""
    return "\n".join([*_intro(datasets, top_ks, rows, seeds, options), "", *_tables(results, gaps, evidence, datasets),
                      "", *_closing(results, t_all)])


def _intro(datasets: list[str], top_ks: dict[str, int | None], rows: dict[str, dict], seeds: int,
           options: dict) -> list[str]:
    """The heading and what ran: flags, rows, seeds, threads."""
    import torch

    return [
        "## accuracy: LEAM (defaults), the paper's LEAM and tfidf-lr "
        "(`benchmarks/bench_accuracy.py`)" if not options else
        f"## accuracy: LEAM (defaults, but {', '.join(f'{k}={v}' for k, v in options.items())}) vs tfidf-lr "
        f"(`benchmarks/bench_accuracy.py`, screening)",
        "",
        "Test-set metrics at the dev-tuned threshold, library defaults for both models, on every note of each split "
        "(notes without a label included, e.g. hoc's abstracts with no hallmark). Flags passed: `--top-k 50` only "
        f"where a set has more than 50 labels (here: {', '.join(d for d in datasets if top_ks[d]) or 'none'}; a "
        "set named NAME-all is the same folder with every code seen in training) and `--descriptions`: for cmc2007 "
        "`../shared/data/caml-mimic-ids/ICD9_descriptions.tsv`, for the MeSH sets their own `descriptions.tsv` "
        "(LEAM's label vectors start from the titles; tfidf-lr ignores them). "
        + ("`leam` is the library's default model: each code's score also counts its best phrase match in the note "
           "(code evidence, max over positions of a local mean of G_lk); `leam (paper)` is Wang et al.'s model exactly "
           "(`train --paper`), same training settings (docs/training.md). "
           if not options else "")
        +
        f"LEAM: mean ± sd over seeds {', '.join(str(1337 + i) for i in range(seeds))}"
        + "".join(f" ({d}, {name}: " + (f"the first {n})" if n else "not run)") for d, caps in SEEDS_CAP.items()
                  if d in datasets
                  for name, n in caps.items() if name in rows and n < seeds)
        + "; tfidf-lr is deterministic. "
        "P@5 is bounded by the few gold labels per note (1.2-2.1 on average). train s = wall time of `train()` "
        "(word2vec, training with dev evaluation each epoch, final scoring) on a shared 2-core CPU. "
        f"Runs repeat exactly at a fixed thread count (here {torch.get_num_threads()}); another count changes the "
        "floating-point order and moves a single seed's micro-F1 by up to about 0.01, which is as large as some gaps.",
    ]


def _tables(results: dict[tuple[str, str], list[dict]], gaps: dict[tuple[str, str], dict], evidence: dict,
            datasets: list[str]) -> list[str]:
    """The tables, each with the paragraph that reads it, and the goals."""
    return [
        table(results),
        "",
        "Gaps: each LEAM row's seed mean minus tfidf-lr on the test notes, then a 95% interval from a "
        f"paired bootstrap ({N_BOOT:,} "
        "resamples of the test notes, both models scored on the same draw, so seed spread and test-sample noise are "
        "both in it) and the share of resamples in which LEAM comes out below. An interval that contains 0 means this "
        "test set cannot tell the two models apart on that metric.",
        "",
        *verdict(gaps),
        "",
        "Worst seed, rare codes and how runs ended. Rare codes: fewer than 20 training notes (frequent: the others); "
        "rare/frequent macro-AUC averages per-code AUC over the codes of the slice with a positive and a negative test "
        "note, macro-F1 averages per-code F1 over the codes of the slice present in test (so single test notes swing "
        "them: read them beside the code count). `mtsamples-rare` and the `mtsamples-keywords` sets (50, 300 and all "
        "keywords as labels) are the rare-code proxies built from mtsamples (see the script's docstring). "
        "'last loss above its lowest': the last epoch's training loss above the run's lowest, the largest over seeds. "
        "Last column, the collapse check of issue 25: the sum of the shared phrase window W1 at the end of each run "
        "(it starts at +1; a window summing to 0 or below turns each code's best-matching phrase into its worst), "
        "and how many seeds ended at or below 0.",
        "",
        robustness_table(results),
        "",
        *shared_task_table(results),
        *evidence_table(evidence),
        "",
        *parts_table(results),
        "Goals of #41 (the fused model, the default; every code against tfidf-lr and the leam row, top 50 against "
        "the leam row):",
        "",
        *issue41_goals(results, evidence),
        "",
        "Goals of the accuracy issue:",
        "",
        *goals(results, datasets),
        "",
        "Goals of the held-out ICD-10 set (issues 25 and 35; here their shape on the coded proxies, each "
        "LEAM row against tfidf-lr; on bc5cdr top 50 also best - worst <= 0.05):",
        "",
        *issue_goals(results),
    ]


def _closing(results: dict[tuple[str, str], list[dict]], t_all: float) -> list[str]:
    """The training defaults, where they come from, and the date, versions and total time (runs reused)."""
    import torch

    from clinicode import __version__
    from clinicode.config import TrainConfig
    from clinicode.models.leam.options import LEAMConfig

    d = TrainConfig()
    return [
        f"LEAM defaults: lr {d.lr} ({d.lr_schedule} schedule: x{d.lr_decay} after every {d.lr_patience} epoch(s) "
        f"without a dev gain), {d.optimizer} weight decay {d.weight_decay} on {d.decay_scope}, weight average (EMA) "
        f"{d.ema_decay}, {LEAMConfig(vocab_size=3, n_labels=1).hidden_dim}-unit head, batch "
        f"{d.batch_size}, up to {d.epochs} "
        f"epochs, patience {d.patience} (never shorter than {d.patience_steps} steps; lr patience never shorter than "
        f"{d.lr_patience_steps}), word2vec passes {'auto' if d.w2v_epochs == 0 else d.w2v_epochs}, "
        f"pos_weight {d.pos_weight}; the phrase window W1 kept >= 0 "
        f"({'on' if LEAMConfig(vocab_size=3, n_labels=1).window_nonneg else 'off'}; the paper's model frees it).",
        "",
        "How these defaults were chosen, the history of the gap, and every setting screened that did not help: "
        "docs/accuracy-tuning.md.",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d}; clinicode {__version__}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {platform.machine()}; total {time.perf_counter() - t_all:.0f} s"
        + (f" ({reused} of {n_runs} runs reused from `--runs`, trained earlier: each row names its commit and "
           "how it was trained; their `train s` were measured then)" if (reused := sum(r.get("reused", False)
                                                                        for rs in results.values() for r in rs))
           and (n_runs := sum(len(rs) for rs in results.values())) else "") + ".",
    ]
