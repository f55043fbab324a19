"""Operations: what keeps `crag serve` safe and running, whatever door a request came in by.

    transport.py  connections, before any request: header timeout, connection cap, no key in the logs
    guard.py      every request first: Host/Origin without a key, body size, no outside events
    auth.py       the API key, for every route but /health and the live page
    admission.py  at most `[server] max_runs` runs in flight and `max_queue` waiting
    upkeep.py     store health probes, run history pruned, runs a dead server left marked failed
    reload.py     a new index version, served without a restart
    preflight.py  the model key checked once at startup, so a refused key stops `crag serve`
"""
