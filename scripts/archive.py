"""Rule archive: results/<experiment>/archive/<name>.tar.gz, the experiment's results with a
SHA-256 manifest (slotbench.workflow.archive)."""

from slotbench.core.entry import fail, progress_log
from slotbench.core.experiments import split
from slotbench.workflow.archive import ArchiveError, build_archive


def main(sm) -> None:
    with progress_log(sm.log[0]) as log:
        try:
            done = build_archive(
                sm.output.archive, sm.params.name, results=split(sm.output.archive)[0],
                inputs=list(sm.input),
                secret_envs=list(sm.params.secret_envs), exclude=[sm.log[0]],
            )
        except ArchiveError as exc:
            fail(f"archive: {exc}", log)
        print(f"archive: {done['path']}: {done['members']} members ({done['files']} result files, "
              f"{done['metadata_records']} Snakemake metadata records), "
              f"{done['bytes'] / 1e6:.2f} MB in {done['seconds']:.1f} s; "
              f"check it with: python -m slotbench archive-verify {done['path']}", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
