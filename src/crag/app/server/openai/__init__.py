"""The OpenAI-compatible door of `crag serve`: any OpenAI client asks crag as the model "crag".

    api.py      the routes: /v1/chat/completions (whole or streamed), /v1/models
    request.py  a chat request read and checked; what crag cannot give is a 400 naming it
    legacy.py   /v1/completions: the prompt asked as a one-turn chat
    errors.py   errors in OpenAI's shape, and every refusal in its caller's dialect

Its runs start through the server's `RunService` (crag.app.runs), as every door's do.
"""
