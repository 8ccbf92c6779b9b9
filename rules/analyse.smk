# a grid of workloads (workload.grid): its targets' frontier, analysed, drawn and reported
GRID = sbworkloads.has_grid(CFG)


rule analyse:
    """Within-rep ratios against the serial arm; medians across reps with bootstrap CIs (with
    reps: auto, the headline ratios' sequential intervals, and the looks' trail); the
    capacity under the configured service levels and the saturation point; the open loop's
    numbers per rate arm, their goodput and the capacity in requests/s (openloop.json); with a
    grid of workloads, their frontier and each one's speedup split (frontier.json).
    """
    input:
        # a workload other than the article's: each run's plan (a trace's lengths)
        **({"plans": plan_files()} if WORKLOAD else {}),
        code=code("analyse.py"),
        cells=result("cells.parquet"),
        requests=result("requests.parquet"),
    output:
        # a workload other than the article's: the lengths planned, counted and traced
        **({"workload": result("analysis/workload.json")} if WORKLOAD else {}),
        # a grid of workloads: the frontier of per-user against aggregate rate, and each
        # workload's split of its speedup at its widest arm
        **({"frontier": result("analysis/frontier.json")} if GRID else {}),
        # reps: auto: every look decided again from the cells (the trail the looks followed)
        **({"stopping": result("analysis/stopping.csv")} if STOPPING else {}),
        ratios=result("analysis/ratios.parquet"),
        summary=result("analysis/summary.csv"),
        capacity=result("analysis/capacity.json"),
        openloop=result("analysis/openloop.json"),
    log:
        result("logs/analyse.log"),
    conda:
        "../envs/analyse.yaml"
    params:
        # each target's workload, by name, for those that are not the article's
        **({"workloads": sbworkloads.by_target(CFG)} if WORKLOAD else {}),
        # reps: auto: the looks' settings and the checks a precise stop needs (a param only
        # then, as workloads: a fixed experiment's analysis is as it was)
        **(
            {"stopping": STOPPING, "checks": sbconfig.check_settings(CFG)}
            if STOPPING
            else {}
        ),
        n_boot=CFG["analysis"]["bootstrap"],
        ci=CFG["analysis"]["ci"],
        seed=CFG["seed"],
        slo=CFG["slo"],
        # each target's usd_per_hour: the cost per million output tokens
        prices=sbconfig.prices(CFG),
    script:
        "../scripts/analyse.py"
