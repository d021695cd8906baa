"""An aiohttp server on 127.0.0.1, on an event loop in a thread of its own: the base of the
chat platforms' fakes, which the bot under test calls from other threads."""
from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


class LoopbackServer:
    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=name)

    def routes(self, app: web.Application) -> None:
        """Add the platform's endpoints."""
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        self._runner, self.port = self._run(self._serve())
        return self

    def close(self) -> None:
        self._run(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self, coro, timeout: float = 10.0):
        """Run coro on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _serve(self) -> tuple[web.AppRunner, int]:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.routes(app)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]
