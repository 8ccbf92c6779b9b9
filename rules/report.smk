rule report:
    """results/report.md, a self-contained results/report.html and results/provenance.json.

    The report presents what the earlier stages wrote: the numbers (summary.csv, and the open
    loop's openloop.json, a section only when some target has rate arms), every check's
    verdict and the headline decision (results/checks/), the figures and their sources, the
    fingerprints, and cells.parquet for the provenance of each cell. The resolved config is a
    param (the report shows it; every provenance entry records its SHA-256), so any config
    change re-renders the report; no request is sent for that.
    """
    input:
        # the paired design's comparison (design: paired) and its figure
        **(
            {
                "paired": "results/analysis/paired.json",
                "paired_figure": "results/figures/paired.png",
            }
            if PAIRED
            else {}
        ),
        code=code("report.py"),
        templates=html_templates(),
        summary="results/analysis/summary.csv",
        capacity="results/analysis/capacity.json",
        openloop="results/analysis/openloop.json",
        checks="results/checks",
        cells="results/cells.parquet",
        sources="results/figures/sources.json",
        figures=expand("results/figures/{name}.png", name=FIGURES + OPEN_FIGURES),
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
        config=sbconfig.canonical(CFG),
        # raw files deleted or changed since consolidation: re-render even if results/ lost
        # cells.parquet to a refused consolidation
        token=RAW_TOKEN,
    script:
        "../scripts/report.py"
