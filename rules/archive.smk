ARCHIVE = result(f"archive/{CFG['archive']['name']}.tar.gz")


rule resolved_config:
    """The config the rules see, defaults filled and validated, in
    results/<experiment>/config.resolved.yaml."""
    output:
        config=report(
            result("config.resolved.yaml"),
            caption="../report/config.rst",
            category="Configuration",
        ),
    log:
        result("logs/resolved_config.log"),
    conda:
        "../envs/measure.yaml"
    params:
        config=sbconfig.canonical(CFG),
    script:
        "../scripts/resolved_config.py"


rule archive:
    """Raw files and hashes, tables, checks, figures, fingerprints, config, report, logs, the
    Snakemake metadata, pip freeze and the git state in one .tar.gz with a SHA-256 manifest.
    """
    input:
        raw=raw_files,
        sha256=raw_sha256_files,
        plans=plan_files,
        fingerprints=fingerprint_files,
        tables=rules.consolidate.output,
        checks=rules.checks.output,
        analysis=rules.analyse.output,
        figures=rules.figures.output,
        report=rules.report.output,
        config=rules.resolved_config.output.config,
    output:
        archive=ARCHIVE,
    log:
        result("logs/archive.log"),
    conda:
        "../envs/measure.yaml"
    params:
        name=CFG["archive"]["name"],
        # names only: the archive refuses any member that contains one of their values
        secret_envs=sorted(
            {t["api_key_env"] for t in CFG["targets"] if "api_key_env" in t}
        ),
    script:
        "../scripts/archive.py"
