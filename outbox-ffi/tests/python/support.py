"""What the Python tests share: a scripted HTTP server on 127.0.0.1, a sink written the way an
app writes one (urllib), fast options and bounded waits on the outbox's own events."""

import asyncio
import http.server
import threading
import time
import urllib.error
import urllib.request

import outbox_ffi as o


def now_ms():
    return int(time.time() * 1000)


class Server:
    """A local HTTP server whose answer for each request comes from `script(key, payload,
    headers, n)` (`n`: earlier requests with this key), returning (status, headers, body).
    Every request is recorded as a hit when it arrives: (time_ms, key, payload, status)."""

    def __init__(self, script=None, delay=0.0):
        self.script = script or (lambda key, payload, headers, n: (200, {}, b""))
        self.delay = delay
        self.hits = []
        self.changed = threading.Condition()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                payload = self.rfile.read(length)
                key = self.headers.get("Idempotency-Key")
                with server.changed:
                    n = sum(1 for hit in server.hits if hit[1] == key)
                    status, headers, body = server.script(key, payload, self.headers, n)
                    # Recorded as it arrives, before it is answered: a runner's clock reading
                    # taken on the answer is never earlier than the hit's time.
                    server.hits.append((now_ms(), key, payload, status))
                    server.changed.notify_all()
                if server.delay:
                    # The server's own pace, so that a drain takes a while (not an assertion).
                    time.sleep(server.delay)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    self.wfile.flush()
                except OSError:
                    # The client is gone (the kill test kills it); the server had the write.
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d/writes" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def delivered_keys(self):
        with self.changed:
            return {hit[1] for hit in self.hits if 200 <= hit[3] < 300}

    def hits_of(self, key):
        with self.changed:
            return [hit for hit in self.hits if hit[1] == key]

    def wait(self, predicate, timeout=15.0):
        """Waits until `predicate(server)` holds, woken by each request; fails after `timeout`."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("the server never saw what the test waited for")
                self.changed.wait(left)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def response(status, retry_after=None, date=None, detail=None):
    return o.Delivery.RESPONSE(
        status=status, retry_after=retry_after, date=date, location_elsewhere=None, detail=detail
    )


class UrllibSink(o.DeliverySink):
    """Delivery as an app in Python writes it: POST with the record's key, report the status
    and the headers the classifier reads, or no answer. `before(record)` may raise, as a
    buggy app's code would."""

    def __init__(self, url, before=None):
        self.url = url
        self.before = before

    def deliver(self, record):
        if self.before is not None:
            self.before(record)
        headers = {"Idempotency-Key": record.key}
        if record.expected_version is not None:
            # The write's precondition, as the built-in sink sends it.
            version = record.expected_version
            headers["If-Match"] = version if version.startswith('"') else '"%s"' % version
        request = urllib.request.Request(self.url, data=record.payload, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return response(answer.status)
        except urllib.error.HTTPError as answer:
            detail = answer.read(256).decode("utf-8", "replace")
            return response(
                answer.code,
                retry_after=answer.headers.get("Retry-After"),
                date=answer.headers.get("Date"),
                detail=detail,
            )
        except OSError as err:
            return o.Delivery.NO_ANSWER(reason=str(err))


def quiet_slow_callbacks():
    """The test case runs asyncio in debug mode, which reports every step of the loop over
    100 ms; a step here waits for the GIL held by the sink's and server's threads, which is not
    what a test checks."""
    asyncio.get_running_loop().slow_callback_duration = 5.0


def fast_options(online=True):
    """Short backoffs and leases so a test takes a moment, not minutes."""
    options = o.default_options()
    options.online = online
    options.policy.backoff = o.BackoffOptions.EXPONENTIAL(initial_ms=20, factor=2.0, cap_ms=200)
    options.runner.lease_ms = 1000
    options.runner.safety_poll_ms = 200
    options.runner.relink_spread_ms = 0
    options.runner.rejection_storm = 0
    options.runner.delivery_timeout_ms = 5000
    options.runner.store_timeout_ms = 5000
    return options


async def wait_for(outbox, condition, timeout=15.0, seen=None):
    """Waits until `await condition()` holds, checking again after each event the outbox sends
    (and at least every 100 ms); fails after `timeout`. Events read are appended to `seen`."""
    deadline = time.monotonic() + timeout
    while True:
        if await condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError("timed out; stats: %s" % (await outbox.stats(),))
        event = await outbox.next_event(100)
        if event is not None and seen is not None:
            seen.append(event)


async def wait_event(outbox, match, timeout=15.0, seen=None):
    """Reads events until one satisfies `match` and returns it; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = await outbox.next_event(100)
        if event is None:
            continue
        if seen is not None:
            seen.append(event)
        if match(event):
            return event
    raise AssertionError("no matching event; stats: %s" % (await outbox.stats(),))


async def quiet_events(outbox, quiet_ms=150):
    """The events sent until none came for `quiet_ms` (at most 5 s of them)."""
    events = []
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        event = await outbox.next_event(quiet_ms)
        if event is None:
            return events
        events.append(event)
    raise AssertionError("events never stopped: %r" % events[-5:])
