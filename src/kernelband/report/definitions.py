"""What each figure of a report means, in the words the report prints beside it."""

FAST = 1.1  # Fast@1: a speedup strictly above this
MARGIN = 0.01  # "faster": re-measured above 1 + max(MARGIN, 2 x the run's noise floor's distance from 1)

DEFINITIONS = {
    "speedup": "over the starting kernel k0, runtime-weighted over the search shapes; k0 counts 1.0",
    "geomean": "geometric mean over tasks, computed per seed and then averaged over the seeds",
    "fast1": f"share of tasks with a speedup above {FAST}x (denominator: all tasks)",
    "current": "the best kernel produced in iteration t itself; a task whose iteration produced no correct "
               "kernel is left out of the geomean (n_valid says how many remain; geomean_k0 counts it "
               "as 1.0 instead) and counts as not fast in Fast@1",
    "best": "the best kernel found up to iteration t, k0 included (so never below 1.0)",
    "best_generated": "the best generated kernel up to iteration t, k0 not counted (may be below 1.0); tasks "
                      "with no correct generated kernel yet are left out of the geomean, as for current. "
                      "This reading of the paper's Table 2 makes it equal to the current iteration at t=1, as "
                      "the paper's first columns are",
    "correct_eval_pct": "share of evaluated candidates (k0 excluded, search shapes) whose outcome was ok",
    "correct_task_pct": "share of tasks where at least one generated kernel was correct (the release's "
                        "'correct')",
    "improved_task_pct": "share of tasks whose best kernel is a generated one, faster than k0 and correct "
                         "on the held-out shapes too",
    "faster_task_pct": f"share of tasks where the kernel handed back is a generated one that is faster on "
                       f"evidence: re-measured on fresh inputs above 1 + max({MARGIN}, 2 x |noise floor - 1|) "
                       f"(the noise floor: k0 timed against itself), and above 1.0 on the held-out shapes "
                       f"where the task has any. A run not re-measured gets no verdict (n_faster_unknown)",
    "geomean_correct": "the release's protocol: geomean, over correct tasks only, of the best correct "
                       "generated kernel's speedup (may be below 1.0)",
    "confirmed": "the best kernel checked and timed once more after the search, on the search shapes with "
                 "fresh inputs: the best speedup is the largest of many noisy measurements and leans high, this "
                 "one does not; geomean over tasks that have it (k0 as best counts 1.0)",
    "held_out": "the best kernel timed once on shapes never seen during the search; geomean over tasks "
                "that have it (k0 as best counts 1.0)",
    "sol_median": "median over tasks of the best kernel's speed-of-light fraction (itself the median over "
                  "the search shapes of bound_ms / kernel_ms; 1.0 is the speed of light)",
    "sol_median_large": "as sol_median, over the search shapes that move at least 16 MB only (the bound "
                        "there is set by bandwidth or compute, not by the launch floor)",
    "vs_eager": "the best kernel's runtime-weighted speedup over the task's torch reference as written (torch "
                "eager), timed beside it by the same rules; geometric mean over the tasks that have one",
    "vs_compile": "as vs_eager, over torch.compile(mode=\"max-autotune-no-cudagraphs\") of the reference",
    "tokens": "LLM tokens (in + out) spent in the iteration, mean per task",
}
