"""The app's process killed with SIGKILL in the middle of a drain, then started again on the
same file: no acknowledged write is lost, and a scheduled retry keeps its deadline."""

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import outbox_ffi as o
from child import options as child_options
from support import Server, UrllibSink, quiet_slow_callbacks, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
COUNT = 60


class KillTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        quiet_slow_callbacks()

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "outbox.db")

        def script(key, payload, headers, n):
            if key == "kill-0" and n == 0:
                return 503, {}, b"busy"
            return 200, {}, b""

        # 30 ms a request, one at a time: the drain of 60 writes takes about two seconds.
        self.server = Server(script, delay=0.03)

    def tearDown(self):
        self.server.close()
        self.dir.cleanup()

    async def test_sigkill_mid_drain_loses_nothing_and_keeps_the_schedule(self):
        child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "child.py"), self.path, self.server.url, str(COUNT)],
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ,
        )
        acked = {}
        retrying = {}
        lines = threading.Condition()

        def read():
            for line in child.stdout:
                words = line.split()
                with lines:
                    if words[0] == "ack":
                        acked[int(words[1])] = words[2]
                    elif words[0] == "retrying":
                        retrying[int(words[1])] = int(words[2])
                    lines.notify_all()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            # Mid-drain: all acknowledged, the first write's retry scheduled, some writes out.
            deadline = time.monotonic() + 20
            with lines:
                while not (
                    len(acked) == COUNT
                    and 1 in retrying
                    and len(self.server.delivered_keys()) >= 10
                ):
                    self.assertLess(time.monotonic(), deadline, "the child never got going")
                    lines.wait(0.05)
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait(10)
            reader.join(10)
            child.stdout.close()
        self.assertEqual(child.returncode, -signal.SIGKILL)
        delivered_before = self.server.delivered_keys()
        self.assertEqual(len(acked), COUNT)
        self.assertLess(
            len(delivered_before), len(acked), "the kill should land before the drain ended"
        )
        retry_at = retrying[1]

        # The same file, opened again by a new "process" of the app (this one).
        outbox = await o.open_outbox(self.path, child_options(), UrllibSink(self.server.url))
        try:
            first = await outbox.get(1)
            self.assertEqual(first.key, "kill-0")
            self.assertEqual(first.state, o.RecordState.RETRYING)
            self.assertEqual(first.next_attempt_at, retry_at)
            self.assertEqual(first.attempts, 1)

            async def all_delivered():
                return set(acked.values()) <= self.server.delivered_keys()

            await wait_for(outbox, all_delivered, timeout=30)

            async def settled():
                stats = await outbox.stats()
                return stats.pending + stats.retrying + stats.in_flight == 0

            await wait_for(outbox, settled, timeout=10)
            stats = await outbox.stats()
            self.assertEqual(stats.delivered, len(acked))
            self.assertEqual((stats.needs_attention, stats.rejected), (0, 0))
            # The retry went at its deadline from before the kill, not earlier.
            second = [hit for hit in self.server.hits_of("kill-0") if hit[3] == 200]
            self.assertGreaterEqual(second[0][0], retry_at)
        finally:
            await outbox.shutdown(2000)


if __name__ == "__main__":
    unittest.main()
