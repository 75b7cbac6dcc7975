"""The run database's tables (SQLite), created by the run store when it opens a database."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS benches (
    id INTEGER PRIMARY KEY,
    suite TEXT NOT NULL,
    config TEXT NOT NULL,          -- JSON: policies, iterations, seeds, proposer, preset, ...
    status TEXT NOT NULL,          -- running | done | quarantined
    created REAL NOT NULL,
    finished REAL
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    bench_id INTEGER REFERENCES benches(id),
    task TEXT NOT NULL,            -- as the user named it
    task_key TEXT NOT NULL,        -- hash of the task's sources
    policy TEXT NOT NULL,
    proposer TEXT NOT NULL,
    seed INTEGER NOT NULL,
    config TEXT NOT NULL,          -- JSON: iterations, q, evaluations, preset, model, ...
    status TEXT NOT NULL,          -- RunStatus: running | done | failed | interrupted
    device TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    finished REAL,
    summary TEXT,                  -- JSON, once done
    reason TEXT NOT NULL DEFAULT '', -- why a failed or interrupted run ended
    handed_back TEXT NOT NULL DEFAULT '' -- the module handed back (best.py), once done
);
CREATE TABLE IF NOT EXISTS candidates (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    id INTEGER NOT NULL,           -- within the run; k0 is 0
    parent INTEGER,
    strategy TEXT,
    iteration INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    source TEXT NOT NULL,
    hash TEXT NOT NULL,
    rationale TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, id)
);
CREATE TABLE IF NOT EXISTS proposals (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    iteration INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    parent INTEGER NOT NULL,
    strategy TEXT NOT NULL,
    candidate INTEGER,             -- NULL when nothing was proposed
    error TEXT NOT NULL DEFAULT '',
    rationale TEXT NOT NULL DEFAULT '',
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL DEFAULT '',  -- a ProposalOutcome: ok, no_code, duplicate, timeout, ...
    PRIMARY KEY (run_id, iteration, slot)
);
CREATE TABLE IF NOT EXISTS evaluations (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    candidate INTEGER NOT NULL,
    which TEXT NOT NULL,           -- search | held_out | handed_back[_2] (the module handed back, rewritten)
    outcome TEXT NOT NULL,
    speedup REAL,
    result TEXT NOT NULL,          -- JSON EvalResult (with what its autotuners chose: `tuned`)
    created REAL NOT NULL,
    PRIMARY KEY (run_id, candidate, which)
);
CREATE TABLE IF NOT EXISTS iterations (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    iteration INTEGER NOT NULL,
    arms TEXT NOT NULL,            -- JSON: [{candidate, strategy, child, outcome, reward}]
    best_speedup REAL,
    iteration_speedup REAL,        -- the best speedup among this iteration's children
    pool_size INTEGER NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    stats TEXT NOT NULL,           -- JSON: the policy's statistics
    seconds REAL NOT NULL,
    PRIMARY KEY (run_id, iteration)
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    iteration INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    latency_s REAL,
    outcome TEXT NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    attempts INTEGER               -- HTTP requests, retries included; NULL: recorded before it was counted
);
CREATE TABLE IF NOT EXISTS baselines (
    gpu TEXT NOT NULL,
    driver TEXT NOT NULL,
    triton TEXT NOT NULL,
    task_key TEXT NOT NULL,
    preset TEXT NOT NULL,
    result TEXT NOT NULL,          -- JSON EvalResult of the reference against itself
    created REAL NOT NULL,
    PRIMARY KEY (gpu, driver, triton, task_key, preset)
);
CREATE TABLE IF NOT EXISTS grid (
    bench_id INTEGER NOT NULL REFERENCES benches(id),
    task TEXT NOT NULL,
    row TEXT NOT NULL,             -- JSON: one task of the exhaustive launch-parameter grid (search_quality.py)
    created REAL NOT NULL,
    PRIMARY KEY (bench_id, task)
);
-- Knowledge carried across kernels (knowledge.py): one row per pull, written as its evaluation finishes.
CREATE TABLE IF NOT EXISTS knowledge_pulls (
    id INTEGER PRIMARY KEY,        -- the order of writing: a run warm-starts from the rows up to its cut
    gpu TEXT NOT NULL,             -- the GPU model the child was measured on
    rules INTEGER NOT NULL,        -- the evaluator's rules (records.RULES) it was judged by
    origin TEXT NOT NULL,          -- the run database the run is in (the knowledge may live in another)
    run_id INTEGER NOT NULL,       -- in that database
    pull INTEGER NOT NULL,         -- the policy's pull count: a resumed run's replay writes nothing twice
    task_key TEXT NOT NULL,
    split TEXT NOT NULL,           -- train | test (tasks/split.py)
    strategy TEXT NOT NULL,
    phi TEXT NOT NULL,             -- JSON: phi of the parent
    profiled INTEGER NOT NULL,     -- 1: phi from Nsight Compute; 0: the search skipped it (compiler counters only)
    reward REAL NOT NULL,          -- 1 - T_child/T_parent, -1 when the child failed
    faster INTEGER NOT NULL,       -- reward > 0: psi's label
    family TEXT,                   -- the built-in rewriter's variant family (rewriter/priors.py); NULL: other
    load TEXT,                     -- light | mid | heavy: the parent's load; NULL: unknown
    gain REAL,                     -- T_parent/T_child; NULL when the child failed
    created REAL NOT NULL,
    UNIQUE (origin, run_id, pull)
);
"""
