"""Slow connections: does /health answer while thousands of connections each hold half a request?

    .venv/bin/python benchmarks/slow_connections.py [--connections 10500] [--seconds 20] [--plain] [--smoke]

A server process on loopback under the usual soft limit of 1024 open files (`ulimit -n`), as
`crag serve` runs uvicorn (ops/transport.py: header timeout, connection cap, and the raised
file limit), or, with `--plain`, uvicorn as it comes. Its app is a two-byte /health: what is
measured is the transport, before any app or key. This process opens `--connections`
connections that each send half a request line, and meanwhile asks /health on a new
connection every 0.25 s (each given 2 s). It prints one line:

    slow connections: 10500 opened (guarded), /health 145/145 answered, longest wait 0.86 s, 0 held at the end

then the goals line and the JSON line every benchmark ends with (`_harness`); the goal is every
/health answered. On a 2-core machine (flood, server and prober
sharing it), `--seconds 40`: guarded 145/145 answered, longest 0.86 s, none held at the end
(the flood took 17 s; the header timeout closed the last); `--plain --seconds 25`: 8/95
answered, 1010 held (the server at its file limit, accepting nothing for a second at a time).
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import subprocess
import sys
import threading
import time

import _harness

SERVER = """
import resource, sys, uvicorn
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

async def app(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

options = {"log_level": "warning"}
if sys.argv[2] == "guarded":
    from crag.app.server.ops.transport import make_room_for, uvicorn_options
    from crag.config.runs import ServerSettings
    server = ServerSettings(header_timeout=10, max_connections=1000)
    make_room_for(server.max_connections)
    options |= uvicorn_options(server)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), lifespan="off", **options)
"""


def health(port: int) -> float | None:
    """Seconds /health took on a new connection, or None if not answered within 2 s."""
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            reply = sock.recv(64)
        return time.perf_counter() - start if reply.startswith(b"HTTP/1.1 200") else None
    except OSError:
        return None


def probe(port: int, seconds: float, probes: list[float | None]) -> None:
    """/health every 0.25 s for `seconds`, in a thread of its own (not behind the flood's loop)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        probes.append(health(port))
        time.sleep(0.25)


Held = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


async def slow(port: int, held: Held, gate: asyncio.Semaphore) -> None:
    async with gate:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        except (OSError, asyncio.TimeoutError):
            return
        writer.write(b"GET /health HT")
        held.append((reader, writer))


async def measure(port: int, connections: int, seconds: float) -> tuple[int, list[float | None], int]:
    held: Held = []
    gate = asyncio.Semaphore(500)
    probes: list[float | None] = []
    prober = threading.Thread(target=probe, args=(port, seconds, probes))
    prober.start()
    start = time.monotonic()
    await asyncio.gather(*(slow(port, held, gate) for _ in range(connections)))
    print(f"  {len(held)} slow connections opened in {time.monotonic() - start:.1f} s", file=sys.stderr)
    await asyncio.to_thread(prober.join)
    still = sum(not reader.at_eof() and reader.exception() is None for reader, _ in held)  # not closed
    for _, writer in held:
        writer.close()
    return len(held), probes, still


def main() -> int:
    cli = _harness.parser(__doc__)
    cli.add_argument("--connections", type=int, default=10_500)
    cli.add_argument("--seconds", type=float, default=20.0)
    cli.add_argument("--plain", action="store_true", help="uvicorn as it comes, without crag's transport")
    cli.add_argument("--port", type=int, default=0, help="the server's port (0: a free one)")
    args = _harness.parse(cli, smoke={"connections": 50, "seconds": 2.0})
    port = args.port or free_port()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.connections + 1000)), hard))
    kind = "plain" if args.plain else "guarded"
    with _harness.measured(__file__, args) as run:
        server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), kind], env=os.environ)
        try:
            while health(port) is None:
                if server.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
            opened, probes, still = asyncio.run(measure(port, args.connections, args.seconds))
        finally:
            server.terminate()
            server.wait(10)
        answered = [p for p in probes if p is not None]
        longest = max(answered, default=float("nan"))
        print(f"slow connections: {opened} opened ({kind}), /health {len(answered)}/{len(probes)} answered, "
              f"longest wait {longest:.2f} s, {still} held at the end")
        run.figures.update(opened=opened, probes=len(probes), answered=len(answered), longest_wait_s=longest,
                           held_at_end=still, server=kind)
        run.goal("/health probes answered, share", len(answered) / max(len(probes), 1), at_least=1.0)
    return 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
