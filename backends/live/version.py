"""Which engine, at which version, a server runs: asked of the endpoint each engine answers it on.

- vLLM (and vLLM-Ascend, which serves through vLLM's API server): `GET /version`
  answers `{"version": "0.11.0"}` (vllm/entrypoints/openai/api_server.py).
- SGLang: `GET /get_server_info` carries `"version"` among the server args
  (sglang/srt/entrypoints/http_server.py).
- llama-server: `GET /props` carries `"build_info"`, such as `b6800-1a2b3c4`
  (tools/server/server.cpp; a build from an sdist without git says `b0-unknown`).

The first endpoint that answers 200 with the field wins; a server that answers
none has an unknown version (None), never a guessed one.
"""

from __future__ import annotations

import httpx

PROBES = (
    ("/version", "version", "vllm"),
    ("/get_server_info", "version", "sglang"),
    ("/props", "build_info", "llama.cpp"),
)


async def engine_version(client: httpx.AsyncClient, timeout_s: float = 5.0) -> str | None:
    """`"<engine> <version>"` of the server `client` talks to, or None when no probe answers."""
    for path, field, engine in PROBES:
        try:
            response = await client.get(path, timeout=timeout_s)
            value = response.json().get(field) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if isinstance(value, str) and value:
            return f"{engine} {value}"
    return None
