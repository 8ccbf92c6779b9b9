rule rep:
    """One rep: derive its plan from (seed, target, run, rep), warm up, run every arm in its
    order, write the raw file atomically.

    The raw file's SHA-256, computed from the bytes written, goes to rep<N>.json.sha256.
    """
    input:
        plan=result("plan/{target}/{run}.json"),
    output:
        raw=result("raw/{target}/{run}/rep{rep}.json"),
        sha256=result("raw/{target}/{run}/rep{rep}.json.sha256"),
    log:
        progress=result("logs/rep/{target}/{run}/rep{rep}.log"),
        server=result("logs/rep/{target}/{run}/rep{rep}.server.log"),
    priority: rep_priority
    conda:
        "../envs/measure.yaml"
    resources:
        **measuring_resources(),
    params:
        target=target_cfg,
        settings=sbconfig.measurement_settings(CFG),
        # how the requests are sent: client processes and their CPUs (recorded in the raw file)
        client=sbconfig.client_settings(CFG),
        # recorded in the raw file: consolidation refuses to pool reps measured differently
        experiment=experiment,
    script:
        "../scripts/rep.py"
