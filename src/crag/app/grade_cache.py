"""Which grade cache a door uses, and its upkeep (`crag cache stats|clear`).

Grades are kept beside the index (`grades.sqlite`, crag.index.grade_cache), unless `crag serve`
keeps its runs in PostgreSQL: then in that database (table `crag_grades`), shared by every
server that shares it (crag.index.grade_cache_postgres). `crag serve` asks `grade_cache_for`
which one; `crag cache` reads or empties either through `cache_stats` and `clear_cache`, so
no command reaches into the server's run store for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crag._bounded import store_errors
from crag.errors import ConfigError, CragError, hide_password

if TYPE_CHECKING:
    from crag.config import Settings
    from crag.index.grade_cache import CacheStats, GradeCache
    from crag.index.grade_cache_postgres import PostgresGradeCache

POSTGRES_SCHEMES = ("postgresql://", "postgres://")  # a store URL that names PostgreSQL
UPKEEP_TIMEOUT = 10.0  # seconds for a command's one call: a database across the network


def grade_cache_for(settings: Settings) -> PostgresGradeCache | None:
    """On a postgresql:// store, the grade cache in the same database, shared by every server
    that shares it; None otherwise (the workflow keeps grades in SQLite beside the index)."""
    target = settings.server.store or ""
    if not settings.cache.enabled or not target.startswith(POSTGRES_SCHEMES):
        return None
    return postgres_grade_cache(target, settings)


def postgres_grade_cache(url: str, settings: Settings, *, timeout: float = 2.0) -> PostgresGradeCache:
    """The grade cache in the PostgreSQL database at `url`."""
    from crag.index.grade_cache_postgres import PostgresGradeCache

    if not url.startswith(POSTGRES_SCHEMES):
        raise ConfigError(f"{url.split('://')[0]} is not a postgresql:// URL; the grade cache lives "
                          "in PostgreSQL only with a postgresql:// store (else grades.sqlite beside the index).")
    hide_password(url)  # its passwords registered: asyncpg's errors may quote the URL
    return PostgresGradeCache(url, max_entries=settings.cache.max_entries, timeout=timeout)


def cache_stats(settings: Settings, store: str | None = None) -> CacheStats:
    """How full the grade cache is: the one beside `settings`' index, or with `store` (a
    postgresql:// URL) the one `crag serve` keeps in that database."""
    if store:
        stats, _ = _in_postgres(store, settings, clear=False)
        return stats  # type: ignore[return-value]
    cache = _beside_index(settings)
    try:
        return cache.stats()
    finally:
        cache.close()


def clear_cache(settings: Settings, store: str | None = None) -> tuple[int, str]:
    """Empty the grade cache (as `cache_stats` picks it): how many grades it held, and where."""
    if store:
        cleared, where = _in_postgres(store, settings, clear=True)
        return cleared, f"{where} table crag_grades"  # type: ignore[return-value]
    cache = _beside_index(settings)
    try:
        return cache.clear(), str(cache.path)
    finally:
        cache.close()


def _beside_index(settings: Settings) -> GradeCache:
    from crag.index.grade_cache import FILE_NAME, GradeCache

    if not settings.index.path.is_dir():
        from crag.errors import IndexNotFoundError

        raise IndexNotFoundError(f"No index at {settings.index.path}, so no grade cache; "
                                 "give one with --index, or build it: crag ingest YOUR_DOCS")
    return GradeCache(settings.index.path / FILE_NAME, max_entries=settings.cache.max_entries)


def _in_postgres(store: str, settings: Settings, *, clear: bool) -> tuple[int | CacheStats, str]:
    """One call on the grade cache in PostgreSQL, from synchronous code, and where it is (the
    URL without its password); any failure of the database or the network is one `CragError`."""
    import asyncio

    cache = postgres_grade_cache(store, settings, timeout=UPKEEP_TIMEOUT)

    async def work() -> int | CacheStats:
        try:
            return await (cache.aclear() if clear else cache.astats())
        except store_errors() as exc:  # asyncpg's and the network's: one line, as any error
            raise CragError(f"The grade cache in {cache.where} could not be used ({type(exc).__name__}: "
                            f"{exc}); is the database up?") from None
        finally:
            await cache.aclose()

    return asyncio.run(work()), cache.where
