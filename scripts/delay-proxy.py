#!/usr/bin/env python3
"""A TCP proxy that delays everything by DELAY_MS in each direction: a long link on one machine
(this kernel has no sch_netem). Usage: delay-proxy.py LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS [LOG].
Listens on 127.0.0.1; prints "ready" once listening; order within each direction is kept.
LOG, if given, gets "listening" once it listens, a line per chunk carried ("c2s N" client to server, "s2c N" back), and
"hello-retry" when the server sends a TLS 1.3 HelloRetryRequest (its fixed random, RFC 8446
section 4.1.3): the tests count round trips and retries from it."""
import asyncio
import sys
import time

HELLO_RETRY = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
log = None


def note(line):
    if log is not None:
        log.write(line + "\n")
        log.flush()


async def carry(reader, writer, delay, direction):
    queue = asyncio.Queue()
    tail = b""

    async def take():
        nonlocal tail
        while True:
            data = await reader.read(65536)
            if data:
                note(f"{direction} {len(data)}")
                if direction == "s2c" and HELLO_RETRY in tail + data:
                    note("hello-retry")
                tail = (tail + data)[-64:]
            await queue.put((time.monotonic() + delay, data))
            if not data:
                return

    async def give():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                try:
                    writer.write_eof()
                except OSError:
                    pass
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(take(), give())
    except (ConnectionError, OSError):
        pass


async def main():
    global log
    listen_port, host, port, delay_ms = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 5:
        log = open(sys.argv[5], "a")
    delay = delay_ms / 1000

    async def accepted(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(host, port)
        except OSError:
            client_writer.close()
            return
        note("connection")
        await asyncio.gather(carry(client_reader, server_writer, delay, "c2s"), carry(server_reader, client_writer, delay, "s2c"))
        for w in (client_writer, server_writer):
            w.close()

    server = await asyncio.start_server(accepted, "127.0.0.1", listen_port)
    note("listening")
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
