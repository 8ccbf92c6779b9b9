rule fingerprint:
    """Machine, software, server build and settings, model digest, pipeline version."""
    output:
        report(
            result("fingerprint/{target}/{run}.json"),
            caption="../report/fingerprint.rst",
            category="Fingerprint",
            labels={"target": "{target}", "run": "{run}"},
        ),
    log:
        progress=result("logs/fingerprint/{target}/{run}.log"),
        server=result("logs/fingerprint/{target}/{run}.server.log"),
    priority: run_priority
    conda:
        "../envs/measure.yaml"
    resources:
        **measuring_resources(runtime_min=10),
    params:
        target=target_cfg,
        measurement=sbconfig.measurement_settings(CFG),
        seed=CFG["seed"],
    script:
        "../scripts/fingerprint.py"
