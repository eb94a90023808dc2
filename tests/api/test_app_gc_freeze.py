"""The app's lifespan freezes the heap alive after start-up (`api.app.freeze_startup_heap`): a full
cyclic collection then skips those objects (≈ 170 ms each at the bench's ≈ 355,000, docs/prefix-caching.md,
lat18c), and shutdown thaws them, so a process that makes apps again (this suite) collects them."""

from __future__ import annotations

import asyncio
import gc

from api.app import create_app
from api.settings import Settings


def test_the_lifespan_freezes_the_start_up_heap_and_thaws_it_at_shutdown(migrated_database_url: str) -> None:
    assert gc.get_freeze_count() == 0
    app = create_app(Settings(database_url=migrated_database_url))

    async def frozen_while_serving() -> int:
        async with app.router.lifespan_context(app):
            return gc.get_freeze_count()

    try:
        frozen = asyncio.run(frozen_while_serving())
    finally:
        app.state.engine.dispose()
    assert frozen > 10_000  # the modules, the app, the catalog's tables: everything alive at start-up
    assert gc.get_freeze_count() == 0
