rule rep:
    """One rep: warm up, run every arm in the planned order, write the raw file atomically."""
    input:
        plan="results/plan/{target}/{run}.json",
    output:
        raw="results/raw/{target}/{run}/rep{rep}.json",
    log:
        progress="results/logs/rep/{target}/{run}/rep{rep}.log",
        server="results/logs/rep/{target}/{run}/rep{rep}.server.log",
    conda:
        "../envs/measure.yaml"
    resources:
        llm_server=1,
    params:
        target=target_cfg,
        settings=sbconfig.measurement_settings(CFG),
    script:
        "../scripts/rep.py"
