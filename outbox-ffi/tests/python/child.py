"""The app the kill test starts and kills: opens the outbox at argv[1], delivers to argv[2],
enqueues argv[3] writes and reports on stdout, one line each, every write acknowledged
(`ack ID KEY`, printed once the enqueue returned: the write is durable) and every retry
scheduled (`retrying ID AT`). It never ends by itself."""

import asyncio
import sys
import threading

import outbox_ffi as o
from support import UrllibSink, fast_options

lock = threading.Lock()


def say(line):
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Report(o.EventListener):
    def on_event(self, event):
        if event.is_retrying():
            say("retrying %d %d" % (event.id, event.at))


def options():
    """The same options the test reopens the file with: one retry 3 s after a failure, and
    one delivery at a time, so the kill lands mid-drain."""
    options = fast_options()
    options.policy.backoff = o.BackoffOptions.TABLE(delays_ms=[3000])
    options.policy.jitter = o.JitterKind.NONE
    options.runner.concurrency = 1
    options.runner.batch = 4
    return options


async def main(path, url, count):
    outbox = await o.open_outbox(path, options(), UrllibSink(url))
    outbox.set_event_listener(Report())
    # One transaction for all, so the drain (30 ms a request) is long under way when the kill
    # comes however slow the disk is.
    keys = ["kill-%d" % i for i in range(count)]
    records = await outbox.enqueue_batch([o.Write(payload=key.encode(), key=key) for key in keys])
    for record, key in zip(records, keys):
        say("ack %d %s" % (record, key))
    say("all acked")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
