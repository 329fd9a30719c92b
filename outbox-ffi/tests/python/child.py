"""The app the kill test starts and kills: opens the outbox at argv[1], delivers to argv[2],
enqueues argv[3] writes and reports on stdout, one line each, every write acknowledged
(`ack ID KEY`, printed once `enqueue` returned: the write is durable) and every retry
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
    for i in range(count):
        key = "kill-%d" % i
        record = await outbox.enqueue(o.Write(payload=key.encode(), key=key))
        say("ack %d %s" % (record, key))
    say("all acked")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
