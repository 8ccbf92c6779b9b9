# the workload a target measures, None for the article's
target_workload = lambda w: sbconfig.workload_params(CFG, w.target).get("workload")


rule plan:
    """A run's prompt calibration: the token length every prompt must have. It does not depend
    on reps, so adding reps leaves every existing rep up to date."""
    output:
        result("plan/{target}/{run}.json"),
    log:
        progress=result("logs/plan/{target}/{run}.log"),
        server=result("logs/plan/{target}/{run}.server.log"),
    priority: run_priority
    conda:
        "../envs/measure.yaml"
    resources:
        **measuring_resources(runtime_min=10),
    params:
        # design: paired: the sides of a pair share their arm order and arrivals (a param only
        # then: a run's plan without it is as it was, so nothing measured reruns)
        **({"paired": True} if PAIRED else {}),
        # the target's workload when some target's is not the article's (a param only then, as
        # paired); None for an article target
        **({"workload": target_workload} if WORKLOAD else {}),
        target=target_cfg,
        arms=CFG["arms"],
        requests_per_cell=CFG["requests_per_cell"],
        seed=CFG["seed"],
        prompt=CFG["prompt"],
        control_arm=CFG["control_arm"],
    script:
        "../scripts/plan.py"
