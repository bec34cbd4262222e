"""aiohttp plumbing every HTTP handler shares (a bounded body, Prometheus's parameters, its JSON envelope),
below cluster/, api/ and procs/ so the front, the shards' head reads and the API all use one copy."""
