"""The workflow's plumbing: the config and its schema check, the --configfile files, target
matrices, what a job asks an executor for, Snakemake's leftover state, the archive."""
