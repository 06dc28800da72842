"""Requests sent from the event loop itself (aiohttp), with the kubernetes client's configuration: its TLS
(CA, client certificate, server name), proxy, user agent and credentials (a token refreshed as the client refreshes
it). The same writes through urllib3 on worker threads cost 1.6 times the client's CPU (1.48 against 0.91 ms a pod
create, bench/bench_client.py): the thread hand-offs, http.client's header parsing in Python and the GIL passed between
32 threads."""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlencode

import aiohttp
import orjson
from kubernetes import client
from kubernetes.client.rest import should_bypass_proxies

from superpod.k8s.api import ApiError

Answer = tuple[int, str, bytes, str | None]  # status, reason, body, Retry-After


class Transport:
    """One aiohttp session per event loop (the operator's, the Lease thread's: a session belongs to its loop),
    at most `connections` requests in flight on each. `slot()` is held across a request: a caller asks its guard
    only once it holds one, so nothing waits for a connection between the guard and the send."""

    def __init__(self, api: client.ApiClient, connections: int) -> None:
        self.api, self.connections = api, connections
        cfg = api.configuration
        proxy = cfg.proxy if cfg.proxy and not should_bypass_proxies(cfg.host, cfg.no_proxy or "") else None
        if proxy and not proxy.startswith(("http://", "https://")):
            raise ValueError(f"proxy {proxy}: only HTTP(S) proxies are supported for the operator's writes")
        self._proxy = proxy  # as the kubernetes client chooses it (HTTPS_PROXY, NO_PROXY)
        self._sessions: dict[asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, asyncio.Semaphore]] = {}

    def slot(self) -> asyncio.Semaphore:
        return self._session()[1]

    async def send(self, method: str, path: str, body: dict | None, query: list | None, headers: dict,
                   timeout: float) -> Answer:
        """One request, sent once (never again by aiohttp, nor to a redirect); no answer at all is an ApiError:
        "Unavailable" when no connection was made (nothing was sent), else "Timeout" (it may have reached the
        server)."""
        cfg = self.api.configuration
        session = self._session()[0]
        try:
            url, headers, data = prepared(self.api, method, path, body, query, headers)
        except (OSError, ValueError) as e:  # its credentials could not be read: nothing was sent
            raise ApiError(0, "Unavailable", f"the client's credentials: {e}") from None
        try:
            async with session.request(method, url, data=data, headers=headers, proxy=self._proxy,
                                       proxy_headers=cfg.proxy_headers or None, allow_redirects=False,
                                       server_hostname=getattr(cfg, "tls_server_name", None) or None,
                                       timeout=aiohttp.ClientTimeout(total=timeout)) as response:
                return response.status, response.reason or "", await response.read(), \
                    response.headers.get("Retry-After")
        except aiohttp.ClientConnectorError as e:
            raise ApiError(0, "Unavailable", str(e)) from None
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            raise ApiError(0, "Timeout", str(e) or type(e).__name__) from None

    async def close(self) -> None:
        """Close the session of the running loop (a loop that ends takes its connections with it)."""
        entry = self._sessions.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[0].close()

    def _session(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        entry = self._sessions.get(loop)
        if entry is None:
            for other in [other for other in self._sessions if other.is_closed()]:
                del self._sessions[other]  # a loop that ended (asyncio.run of a tool or a test)
            try:
                context = tls(self.api.configuration)
            except (OSError, ValueError) as e:  # its CA or certificate could not be read: nothing is sent
                raise ApiError(0, "Unavailable", f"the client's TLS configuration: {e}") from None
            connector = aiohttp.TCPConnector(limit=self.connections, ssl=context)
            session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
            # aiohttp sends a PUT or DELETE again by itself when a kept-alive connection drops it: out of sight of
            # the Lease guard, and a write that landed would come back 409 instead of "Timeout". No public switch.
            session._retry_connection = False
            entry = self._sessions[loop] = (session, asyncio.Semaphore(self.connections))
        return entry


def prepared(api: client.ApiClient, method: str, path: str, body: dict | None, query: list | None,
             headers: dict) -> tuple[str, dict, bytes | None]:
    """A request as the client would send it: its URL, its headers with the client's own and its credentials (a
    token refreshed as the client refreshes it), its body encoded by orjson."""
    headers = {**api.default_headers, **headers}
    api.update_params_for_auth(headers, None, ["BearerToken"], path, method, None)
    url = api.configuration.host + path + (f"?{urlencode(query)}" if query else "")
    return url, headers, None if body is None else orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)


def tls(cfg: client.Configuration) -> ssl.SSLContext | bool:
    """The TLS of the client's configuration: its CA (file or data), client certificate, and whether to verify."""
    if not cfg.verify_ssl:
        return False
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None, cadata=getattr(cfg, "ca_cert_data", None))
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    if cfg.assert_hostname is False:
        context.check_hostname = False
    return context
