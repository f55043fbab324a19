"""crag's own routes in `crag serve`, beside the workflow server's (mounted) and the OpenAI door.

    runs.py   POST /workflows/crag/run[-nowait], in the workflow server's request shapes
    pages.py  GET /health, the live page, a finished run's trace and explanation; /handlers
    files.py  GET /files/{file_id}: a document the index lists, for a citation to open
    mcp.py    /mcp: the MCP tools over streamable HTTP (with crag-workflows[mcp])

Each starts or reads runs through the server's `RunService` (crag.app.runs).
"""
