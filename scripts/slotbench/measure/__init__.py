"""Measurement: the plan of a run, the rep that sends its requests (execute, clients, loadgen),
the wire protocols (backends/), the managed servers (servers/), the background sampler and its
sources (thermal, hostload), the fingerprint, and the raw files a rep writes."""
