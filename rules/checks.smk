rule checks:
    """Deviance, rotation bias (refusal), serialisation, and the measurement-integrity checks:
    equal prompts, prefix-cache hits and the control arm, thermal state and drift, the client's
    self-check, and whether the reps give the precision asked for."""
    input:
        cells="results/cells.parquet",
        requests="results/requests.parquet",
        control="results/control.parquet",
        thermal="results/thermal.parquet",
        summary="results/analysis/summary.csv",
    output:
        deviance="results/checks/deviance.csv",
        positions="results/checks/positions.csv",
        serialisation="results/checks/serialisation.csv",
        verdict="results/checks/verdict.json",
        prompts="results/checks/prompts.csv",
        cache_hits="results/checks/cache_hits.csv",
        control="results/checks/control.csv",
        thermal="results/checks/thermal.csv",
        burst="results/checks/burst.csv",
        client="results/checks/client.json",
        sufficiency="results/checks/sufficiency.csv",
    log:
        "results/logs/checks.log",
    conda:
        "../envs/analyse.yaml"
    params:
        rotation_threshold=CFG["checks"]["rotation_threshold"],
        deviance_threshold=CFG["checks"]["deviance_threshold"],
        precision=CFG["checks"]["precision"],
        send_lag_s=CFG["checks"]["send_lag_s"],
        client_cpu_share=CFG["checks"]["client_cpu_share"],
    script:
        "../scripts/checks.py"
