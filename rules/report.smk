rule report:
    """report.md, a self-contained report.html and provenance.json, in results/<experiment>/.

    The report presents what the earlier stages wrote: the numbers (summary.csv, the open
    loop's openloop.json, a section only when some target has rate arms, and a grid of
    workloads' frontier.json, a section only with a grid), every check's
    verdict and the headline decision (checks/), the figures and their sources, the
    fingerprints, and cells.parquet for the provenance of each cell. The resolved config is a
    param (the report shows it; every provenance entry records its SHA-256), so any config
    change re-renders the report; no request is sent for that.
    """
    input:
        # the paired design's comparison (design: paired) and its figure
        **(
            {
                "paired": result("analysis/paired.json"),
                "paired_figure": result("figures/paired.png"),
            }
            if PAIRED
            else {}
        ),
        # a workload other than the article's: its lengths (analysis/workload.json)
        **({"workload": result("analysis/workload.json")} if WORKLOAD else {}),
        # a grid of workloads: the frontier (analysis/frontier.json; its figure is below)
        **({"frontier": result("analysis/frontier.json")} if GRID else {}),
        # reps: auto: the looks' trail (analysis/stopping.csv), the Stopping section's
        **({"stopping": result("analysis/stopping.csv")} if STOPPING else {}),
        code=code("report.py"),
        templates=html_templates(),
        summary=result("analysis/summary.csv"),
        capacity=result("analysis/capacity.json"),
        openloop=result("analysis/openloop.json"),
        checks=result("checks"),
        cells=result("cells.parquet"),
        sources=result("figures/sources.json"),
        figures=expand(
            result("figures/{name}.png"), name=FIGURES + OPEN_FIGURES + GRID_FIGURES
        ),
        fingerprints=fingerprint_files,
    output:
        md=result("report.md"),
        html=result("report.html"),
        provenance=result("provenance.json"),
    log:
        result("logs/report.log"),
    conda:
        "../envs/report.yaml"
    params:
        config=sbconfig.canonical(CFG),
        # raw files deleted or changed since consolidation: re-render even if the experiment lost
        # cells.parquet to a refused consolidation
        token=RAW_TOKEN,
    script:
        "../scripts/report.py"
