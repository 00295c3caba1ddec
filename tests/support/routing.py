"""A request routed in process, as a connection hands it to the router."""

from __future__ import annotations

from typing import Any

import trio

from broker.router import Router
from broker.slots import Slot
from protocol.codec import decode_response, encode_request

PEER = "127.0.0.1:1"


async def call(router: Router, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """The reply's body: a request answered at once comes back as its frame, one answered
    later (a durable wait, a parked join) as a slot, waited for here and timed as the
    connection times it."""
    outcome = router.route(encode_request(api_key, version, 1, body, "test")[4:], PEER)
    if isinstance(outcome, Slot):
        with trio.fail_after(5):
            await outcome.event.wait()
        router.finished(outcome, PEER)
        outcome = outcome.frame
    assert isinstance(outcome, bytes), outcome
    return decode_response(api_key, version, outcome[4:])[1]
