rule analyse:
    """Within-rep ratios against the serial arm; medians across reps with bootstrap CIs; the
    capacity under the configured service levels and the saturation point; the open loop's
    numbers per rate arm, their goodput and the capacity in requests/s (openloop.json).
    """
    input:
        code=code("analyse.py"),
        cells=result("cells.parquet"),
        requests=result("requests.parquet"),
        # a workload other than the article's: each run's plan (a trace's lengths)
        **({"plans": plan_files()} if WORKLOAD else {}),
    output:
        ratios=result("analysis/ratios.parquet"),
        summary=result("analysis/summary.csv"),
        capacity=result("analysis/capacity.json"),
        openloop=result("analysis/openloop.json"),
        # a workload other than the article's: the lengths planned, counted and traced
        **({"workload": result("analysis/workload.json")} if WORKLOAD else {}),
    log:
        result("logs/analyse.log"),
    conda:
        "../envs/analyse.yaml"
    params:
        n_boot=CFG["analysis"]["bootstrap"],
        ci=CFG["analysis"]["ci"],
        seed=CFG["seed"],
        slo=CFG["slo"],
        # each target's usd_per_hour: the cost per million output tokens
        prices=sbconfig.prices(CFG),
        **sbconfig.workload_params(CFG),
    script:
        "../scripts/analyse.py"
