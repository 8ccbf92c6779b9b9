rule checks:
    """Every trap's verdict (results/<experiment>/checks/<trap>.json), its detail tables (CSV)
    and each target's headline decision (checks/headline.json); see slotbench/checks/.
    """
    input:
        code=code("checks.py"),
        cells=result("cells.parquet"),
        requests=result("requests.parquet"),
        control=result("control.parquet"),
        thermal=result("thermal.parquet"),
        host=result("host.parquet"),
        server_metrics=result("server_metrics.parquet"),
        servers=result("servers.json"),
        summary=result("analysis/summary.csv"),
        fingerprints=fingerprint_files,
    output:
        directory(result("checks")),
    log:
        result("logs/checks.log"),
    conda:
        "../envs/analyse.yaml"
    params:
        settings=sbconfig.check_settings(CFG),
    script:
        "../scripts/checks.py"
