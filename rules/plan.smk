rule plan:
    """Rotated arm order per rep and equal-token-length prompts, deterministic from the seed."""
    output:
        "results/plan/{target}/{run}.json",
    params:
        target=target_cfg,
        arms=CFG["arms"],
        reps=CFG["reps"],
        requests_per_cell=CFG["requests_per_cell"],
        seed=CFG["seed"],
        prompt=CFG["prompt"],
    log:
        progress="results/logs/plan/{target}/{run}.log",
        server="results/logs/plan/{target}/{run}.server.log",
    resources:
        llm_server=1,
    script:
        "../scripts/plan.py"
