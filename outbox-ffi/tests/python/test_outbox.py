"""An app written in Python, through the generated bindings, against a real HTTP server on
127.0.0.1: the behaviours issue #33 asks the bindings to show."""

import os
import sqlite3
import tempfile
import unittest

import outbox_ffi as o
from support import (
    Server,
    UrllibSink,
    fast_options,
    quiet_slow_callbacks,
    quiet_events,
    wait_event,
    wait_for,
)


class OutboxTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "outbox.db")
        self.server = None
        self.outboxes = []

    async def asyncSetUp(self):
        quiet_slow_callbacks()

    async def asyncTearDown(self):
        for outbox in self.outboxes:
            await outbox.shutdown(2000)

    def tearDown(self):
        if self.server is not None:
            self.server.close()
        self.dir.cleanup()

    async def open(self, script=None, options=None, before=None, path=None):
        if self.server is None:
            self.server = Server(script)
        outbox = await o.open_outbox(
            path or self.path,
            options or fast_options(),
            UrllibSink(self.server.url, before=before),
        )
        self.outboxes.append(outbox)
        return outbox

    async def test_offline_backlog_is_delivered_when_online(self):
        outbox = await self.open(options=fast_options(online=False))
        keys = ["offline-%d" % i for i in range(100)]
        for key in keys:
            await outbox.enqueue(o.Write(payload=key.encode(), key=key))
        stats = await outbox.stats()
        self.assertEqual((stats.pending, stats.delivered), (100, 0))
        # Offline: nothing is attempted, whatever the runner's timers do meanwhile.
        events = await quiet_events(outbox)
        self.assertFalse([e for e in events if e.is_attempted()])
        self.assertEqual(self.server.hits, [])

        outbox.set_online(True)

        async def all_delivered():
            return (await outbox.stats()).delivered == 100

        await wait_for(outbox, all_delivered)
        self.assertEqual(self.server.delivered_keys(), set(keys))
        stats = await outbox.stats()
        self.assertEqual((stats.pending, stats.retrying, stats.in_flight), (0, 0, 0))
        self.assertIsNone(stats.oldest_created_at)

    async def test_retry_after_pushes_the_schedule(self):
        def script(key, payload, headers, n):
            if key == "busy" and n == 0:
                return 503, {"Retry-After": "1"}, b"maintenance"
            return 200, {}, b""

        outbox = await self.open(script)
        record = await outbox.enqueue(o.Write(payload=b"{}", key="busy"))
        event = await wait_event(outbox, lambda e: e.is_retrying() and e.id == record)
        refused_at = self.server.hits_of("busy")[0][0]
        self.assertTrue(event.spent)
        # The backoff alone would say at most 200 ms; the server asked for a second.
        self.assertGreaterEqual(event.at - refused_at, 1000)
        # At most half as much again, plus however long the answer took to come back.
        self.assertLess(event.at - refused_at, 1500 + 2000)
        waiting = await outbox.get(record)
        self.assertEqual(waiting.state, o.RecordState.RETRYING)
        self.assertEqual(waiting.next_attempt_at, event.at)
        self.assertEqual(waiting.attempts, 1)
        self.assertIn("HTTP 503: maintenance", waiting.last_error)
        # The attempt is kept on the record: its class, the status and the server's words.
        self.assertEqual(len(waiting.history), 1)
        attempt = waiting.history[0]
        self.assertEqual((attempt.outcome_class, attempt.status), ("later", 503))
        self.assertIn("HTTP 503: maintenance", attempt.error)
        self.assertIsNotNone(attempt.took_ms)
        self.assertFalse(waiting.history_unreadable)
        self.assertEqual((await outbox.stats()).retrying, 1)

        await wait_event(outbox, lambda e: e.is_delivered() and e.id == record)
        hits = self.server.hits_of("busy")
        self.assertEqual([hit[3] for hit in hits], [503, 200])
        self.assertGreaterEqual(hits[1][0], event.at)
        self.assertEqual((await outbox.stats()).retrying, 0)

    async def test_422_is_rejected_and_requeue_sends_it_again(self):
        fixed = {"done": False}

        def script(key, payload, headers, n):
            if key == "bad" and not fixed["done"]:
                return 422, {}, b"title is required"
            return 201, {}, b""

        outbox = await self.open(script)
        record = await outbox.enqueue(o.Write(payload=b"{}", key="bad", group="note-1"))
        event = await wait_event(outbox, lambda e: e.is_rejected())
        self.assertEqual(event.id, record)
        rejected = await outbox.get(record)
        self.assertEqual(rejected.state, o.RecordState.REJECTED)
        self.assertEqual(rejected.attempts, 1)
        self.assertIsNone(rejected.next_attempt_at)
        self.assertEqual(rejected.last_error, "HTTP 422: title is required")
        self.assertEqual(
            [(a.outcome_class, a.status, a.error) for a in rejected.history],
            [("rejected", 422, "HTTP 422: title is required")],
        )
        stats = await outbox.stats()
        self.assertEqual((stats.rejected, stats.pending, stats.delivered), (1, 0, 0))
        listed = await outbox.list(o.ListFilter(state=o.RecordState.REJECTED))
        self.assertEqual([r.id for r in listed], [record])
        with self.assertRaises(o.OutboxError.RecordRejected) as raised:
            await outbox.retry(record)
        self.assertEqual(raised.exception.id, record)

        fixed["done"] = True
        await outbox.requeue(record)
        await wait_event(outbox, lambda e: e.is_delivered() and e.id == record)
        stats = await outbox.stats()
        self.assertEqual((stats.rejected, stats.delivered), (0, 1))

    async def test_401_halts_and_resume_drains(self):
        credential = {"good": False}

        def script(key, payload, headers, n):
            return (200, {}, b"") if credential["good"] else (401, {}, b"token expired")

        outbox = await self.open(script)
        ids = [await outbox.enqueue(o.Write(payload=b"%d" % i)) for i in range(5)]
        halted = await wait_event(outbox, lambda e: e.is_halted())
        self.assertIn("HTTP 401", halted.reason)
        self.assertTrue(outbox.is_halted())
        stats = await outbox.stats()
        self.assertIn("HTTP 401", stats.halt_reason)
        self.assertIsNotNone(stats.halted_since)
        self.assertEqual(stats.delivered, 0)
        # Not the records' fault: no budget spent on any of them.
        for record in ids:
            self.assertEqual((await outbox.get(record)).attempts, 0)
        # Deliveries that started before the halt report first; then nothing more goes out.
        await quiet_events(outbox)
        hits = len(self.server.hits)
        events = await quiet_events(outbox)
        self.assertFalse([e for e in events if e.is_attempted()])
        self.assertEqual(len(self.server.hits), hits)

        credential["good"] = True
        # A resume against a halt the person was not shown changes nothing.
        self.assertFalse(await outbox.resume_if("HTTP 500", stats.halted_since))
        self.assertFalse(await outbox.resume_if(stats.halt_reason, stats.halted_since + 1))
        self.assertTrue(outbox.is_halted())
        self.assertEqual((await outbox.stats()).halt_reason, stats.halt_reason)
        self.assertTrue(await outbox.resume_if(stats.halt_reason, stats.halted_since))
        seen = []

        async def drained():
            return (await outbox.stats()).delivered == 5

        await wait_for(outbox, drained, seen=seen)
        self.assertTrue([e for e in seen if e.is_resumed()])
        self.assertFalse(outbox.is_halted())
        self.assertIsNone((await outbox.stats()).halt_reason)

    async def test_needs_attention_held_retry_and_discard(self):
        state = {"fixed": False}

        def script(key, payload, headers, n):
            if key == "flaky" and not state["fixed"]:
                return 500, {}, b"oops"
            if key == "junk":
                return 500, {}, b"always"
            return 200, {}, b""

        options = fast_options()
        options.policy.max_attempts = 2
        outbox = await self.open(script, options)
        flaky = await outbox.enqueue(o.Write(payload=b"1", key="flaky"))
        junk = await outbox.enqueue(o.Write(payload=b"2", key="junk", group="g"))
        behind = await outbox.enqueue(o.Write(payload=b"3", key="behind", group="g"))

        async def both_parked():
            return (await outbox.stats()).needs_attention == 2

        await wait_for(outbox, both_parked)
        stats = await outbox.stats()
        self.assertEqual((stats.needs_attention, stats.held, stats.pending), (2, 1, 1))
        self.assertEqual((await outbox.get(flaky)).attempts, 2)
        self.assertEqual(self.server.hits_of("behind"), [])

        state["fixed"] = True
        await outbox.retry(flaky)
        await wait_event(outbox, lambda e: e.is_delivered() and e.id == flaky)
        await outbox.discard(junk, "dropped by the test")
        await wait_event(outbox, lambda e: e.is_delivered() and e.id == behind)
        stats = await outbox.stats()
        self.assertEqual(
            (stats.needs_attention, stats.held, stats.discarded, stats.delivered), (0, 0, 1, 2)
        )
        stones = await outbox.tombstones(None, 10)
        self.assertEqual([(s.id, s.reason) for s in stones], [(junk, "dropped by the test")])

    async def test_a_raising_sink_is_no_answer_and_the_record_is_retried(self):
        calls = {"n": 0}

        def before(record):
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("the app's code broke")

        outbox = await self.open(before=before)
        record = await outbox.enqueue(o.Write(payload=b"{}", key="boom"))
        retrying = await wait_event(outbox, lambda e: e.is_retrying() and e.id == record)
        self.assertFalse(retrying.spent)
        waiting = await outbox.get(record)
        if waiting is not None:  # it may already have gone on its short backoff
            self.assertEqual((waiting.attempts, waiting.unanswered), (0, 1))
            self.assertIn("the sink raised", waiting.last_error)
            self.assertIn("RuntimeError", waiting.last_error)
        await wait_event(outbox, lambda e: e.is_delivered() and e.id == record)
        self.assertEqual(calls["n"], 2)
        self.assertEqual(self.server.delivered_keys(), {"boom"})

    async def test_replacing_coalesces_and_a_stale_precondition_waits_for_a_person(self):
        def script(key, payload, headers, n):
            match = headers.get("If-Match")
            if match is not None and match != '"4"':
                return 412, {}, b"note-8 is at version 4"
            return 200, {}, b""

        outbox = await self.open(script, fast_options(online=False))
        first = await outbox.enqueue(
            o.Write(payload=b"v1", key="edit-1", group="note-7", replacing="note-7/body")
        )
        second = await outbox.enqueue(
            o.Write(payload=b"v2", key="edit-2", group="note-7", replacing="note-7/body")
        )
        self.assertEqual(first, second)
        events = await quiet_events(outbox)
        self.assertIn(o.OutboxEvent.SUPERSEDED(id=first, group="note-7"), events)
        stale = await outbox.enqueue(
            o.Write(payload=b"title", key="stale-1", group="note-8", expecting="3")
        )
        self.assertEqual((await outbox.get(stale)).expected_version, "3")
        stats = await outbox.stats()
        self.assertEqual((stats.pending, stats.superseded), (2, 1))

        outbox.set_online(True)
        parked = await wait_event(outbox, lambda e: e.is_parked() and e.id == stale)
        self.assertIn("HTTP 412", parked.reason)

        async def settled():
            stats = await outbox.stats()
            return stats.delivered == 1 and stats.needs_attention == 1

        await wait_for(outbox, settled)
        # One request for the two edits, with the newer payload and key.
        self.assertEqual([(h[1], h[2]) for h in self.server.hits if h[1] != "stale-1"],
                         [("edit-2", b"v2")])
        self.assertEqual((await outbox.get(stale)).state, o.RecordState.NEEDS_ATTENTION)

    async def test_a_full_file_refuses_the_write_and_keeps_the_others(self):
        # The queue's own size cap (records, bytes) has not landed in the core; the SQLite
        # file's size limit is what refuses a write here.
        options = fast_options(online=False)
        options.size_limit_bytes = 256 * 1024
        outbox = await self.open(options=options)
        acked = []
        with self.assertRaises(o.OutboxError.StorageFull):
            for i in range(1000):
                acked.append(await outbox.enqueue(o.Write(payload=bytes(4096), key="fill-%d" % i)))
        self.assertGreater(len(acked), 10)
        self.assertEqual((await outbox.stats()).pending, len(acked))
        for record in (acked[0], acked[-1]):
            kept = await outbox.get(record)
            self.assertEqual((kept.state, len(kept.payload)), (o.RecordState.PENDING, 4096))

    async def test_typed_exceptions(self):
        options = fast_options()
        options.max_payload_bytes = 16
        outbox = await self.open(options=options)
        with self.assertRaises(o.OutboxError.InvalidGroup) as raised:
            await outbox.enqueue(o.Write(payload=b"x", group=""))
        self.assertIn("empty", raised.exception.reason)
        with self.assertRaises(o.OutboxError.InvalidGroup):
            await outbox.enqueue(o.Write(payload=b"x", group="a\0b"))
        with self.assertRaises(o.OutboxError.InvalidIdempotencyKey):
            await outbox.enqueue(o.Write(payload=b"x", key="has space"))
        with self.assertRaises(o.OutboxError.PayloadTooLarge) as raised:
            await outbox.enqueue(o.Write(payload=b"x" * 17))
        self.assertEqual((raised.exception.size, raised.exception.max), (17, 16))
        with self.assertRaises(o.OutboxError.NoSuchRecord):
            await outbox.retry(999)
        # Nothing of the refused writes was kept.
        self.assertEqual((await outbox.stats()).pending, 0)
        # Every variant is also the base class, for a catch-all.
        with self.assertRaises(o.OutboxError):
            await outbox.enqueue(o.Write(payload=b"x", group=""))

        bad = fast_options()
        bad.runner.batch = 0
        with self.assertRaises(o.OutboxError.InvalidConfig):
            await self.open(options=bad, path=os.path.join(self.dir.name, "other.db"))

    async def test_a_file_from_a_newer_version_is_refused_untouched(self):
        outbox = await self.open()
        await outbox.enqueue(o.Write(payload=b"kept", key="kept"))
        await outbox.shutdown(2000)
        # What a newer build would leave: a schema version above this one's.
        with sqlite3.connect(self.path) as db:
            supported = db.execute("PRAGMA user_version").fetchone()[0]
            db.execute("PRAGMA user_version = %d" % (supported + 5))
        with self.assertRaises(o.OutboxError.SchemaTooNew) as raised:
            await self.open(path=self.path)
        self.assertEqual(
            (raised.exception.found, raised.exception.supported), (supported + 5, supported)
        )
        with sqlite3.connect(self.path) as db:
            self.assertEqual(db.execute("PRAGMA user_version").fetchone()[0], supported + 5)

        text = os.path.join(self.dir.name, "notes.txt")
        with open(text, "w") as f:
            f.write("not a database, just text that is long enough to have a header\n" * 20)
        with self.assertRaises(o.OutboxError.NotAnOutbox):
            await self.open(path=text)

    async def test_built_in_http_sink_and_a_new_credential(self):
        def script(key, payload, headers, n):
            if headers.get("Authorization") != "Bearer fresh":
                return 401, {}, b"expired"
            return 200, {}, b""

        self.server = Server(script)
        http = o.HttpOptions(url=self.server.url, authorization="Bearer stale")
        outbox = await o.open_http_outbox(self.path, fast_options(), http)
        self.outboxes.append(outbox)
        record = await outbox.enqueue(o.Write(payload=b"{}", key="http-1"))
        await wait_event(outbox, lambda e: e.is_halted())
        outbox.set_authorization("Bearer fresh")
        outbox.resume()
        await wait_event(outbox, lambda e: e.is_delivered() and e.id == record)
        self.assertEqual(self.server.delivered_keys(), {"http-1"})
        # Only the built-in sink has a credential to replace.
        other = await self.open(path=os.path.join(self.dir.name, "own.db"))
        with self.assertRaises(o.OutboxError.InvalidConfig):
            other.set_authorization("Bearer x")

    async def test_event_listener_sees_the_same_events(self):
        import threading

        got = []
        done = threading.Event()

        class Listener(o.EventListener):
            def on_event(self, event):
                got.append(event)
                if event.is_delivered():
                    done.set()
                if len(got) == 1:
                    raise ValueError("a listener that raises keeps listening")

        outbox = await self.open()
        outbox.set_event_listener(Listener())
        record = await outbox.enqueue(o.Write(payload=b"{}"))
        await wait_event(outbox, lambda e: e.is_delivered() and e.id == record)
        self.assertTrue(done.wait(5))
        self.assertTrue(got[0].is_enqueued())
        self.assertIn(o.OutboxEvent.DELIVERED(id=record), got)


if __name__ == "__main__":
    unittest.main()
