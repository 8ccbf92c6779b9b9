from slotbench.provenance import config_digest


rule report:
    """results/report.md, a self-contained results/report.html and results/provenance.json.

    Each target's Measurement integrity section reads the checks' files: unequal prompt
    lengths, prefix-cache hits, the control arm, thermal samples and their summary, the serial
    arm's burst vs plateau, the client self-check and whether there were enough reps.

    The resolved config is a param (the report shows it; every provenance entry records its
    SHA-256), so any config change re-renders the report; no request is sent for that.
    """
    input:
        summary="results/analysis/summary.csv",
        ratios="results/analysis/ratios.parquet",
        deviance="results/checks/deviance.csv",
        positions="results/checks/positions.csv",
        serialisation="results/checks/serialisation.csv",
        verdict="results/checks/verdict.json",
        prompts="results/checks/prompts.csv",
        cache_hits="results/checks/cache_hits.csv",
        control="results/checks/control.csv",
        thermal_summary="results/checks/thermal.csv",
        burst="results/checks/burst.csv",
        client="results/checks/client.json",
        sufficiency="results/checks/sufficiency.csv",
        thermal="results/thermal.parquet",
        requests="results/requests.parquet",
        cells="results/cells.parquet",
        servers="results/servers.json",
        sources="results/figures/sources.json",
        figures=expand("results/figures/{name}.png", name=FIGURES),
        fingerprints=fingerprint_files,
    output:
        md="results/report.md",
        html="results/report.html",
        provenance="results/provenance.json",
    log:
        "results/logs/report.log",
    conda:
        "../envs/report.yaml"
    params:
        config_sha256=config_digest(CFG),
        resolved_config=CFG,
    script:
        "../scripts/report.py"
