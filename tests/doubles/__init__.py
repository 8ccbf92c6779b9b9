"""Test doubles: servers that stand in for the real ones, each scripted so that a test knows
what the client should have seen.

- ``fault_server``: a scripted llama-server that misbehaves on cue;
- ``ollama_double``: a scripted Ollama with N slots (also runs standalone, by path);
- ``openai_double``: a scripted OpenAI-compatible server (``/v1/models``, streamed
  ``/v1/completions``), as vLLM answers;
- ``served``: the life cycle those three share (a free local port, a daemon thread);
- ``pacer`` (``pacer.c``): a server in C that logs the true time of every read and write, for
  grading a client; the benchmarks use it too;
- ``wait``: ``wait_for``, the one way tests wait for a condition with a deadline.

Tests import them as ``from doubles import fault_server`` or ``from doubles.pacer import …``:
pytest puts ``tests/`` on the path (``pythonpath`` in pyproject.toml). Benchmarks, which run as
scripts, put ``tests/`` on their path themselves, the one ``sys.path`` line they carry for it.
"""
