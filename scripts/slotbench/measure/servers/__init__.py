"""The managed servers: llama-server (llamacpp), `ollama serve` (ollama), and the supervisor that
keeps one per target and run (supervisor)."""
