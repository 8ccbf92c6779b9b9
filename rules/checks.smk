rule checks:
    """Every trap's verdict (results/checks/<trap>.json), its detail tables (CSV) and each
    target's headline decision (results/checks/headline.json); see slotbench/checks/."""
    input:
        code=code("checks.py"),
        cells="results/cells.parquet",
        requests="results/requests.parquet",
        control="results/control.parquet",
        thermal="results/thermal.parquet",
        host="results/host.parquet",
        servers="results/servers.json",
        summary="results/analysis/summary.csv",
        fingerprints=fingerprint_files,
    output:
        directory("results/checks"),
    log:
        "results/logs/checks.log",
    conda:
        "../envs/analyse.yaml"
    params:
        settings=sbconfig.check_settings(CFG),
    script:
        "../scripts/checks.py"
