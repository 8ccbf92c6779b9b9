rule plan:
    """Rotated arm order per rep and equal-token-length prompts, deterministic from the seed."""
    output:
        "results/plan/{target}/{run}.json",
    log:
        progress="results/logs/plan/{target}/{run}.log",
        server="results/logs/plan/{target}/{run}.server.log",
    conda:
        "../envs/measure.yaml"
    resources:
        llm_server=1,
    params:
        target=target_cfg,
        arms=CFG["arms"],
        reps=CFG["reps"],
        requests_per_cell=CFG["requests_per_cell"],
        seed=CFG["seed"],
        prompt=CFG["prompt"],
        control_arm=CFG["control_arm"],
    script:
        "../scripts/plan.py"
