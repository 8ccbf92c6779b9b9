rule fingerprint:
    """Machine, software, server build and settings, model digest, pipeline version."""
    output:
        "results/fingerprint/{target}/{run}.json",
    params:
        target=target_cfg,
        measurement=sbconfig.measurement_settings(CFG),
        seed=CFG["seed"],
        reps=CFG["reps"],
    log:
        progress="results/logs/fingerprint/{target}/{run}.log",
        server="results/logs/fingerprint/{target}/{run}.server.log",
    resources:
        llm_server=1,
    script:
        "../scripts/fingerprint.py"
