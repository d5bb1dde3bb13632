"""The one batching rule (lanes and session appends): in one process, plain asyncio."""

import asyncio

from dsh_actors.runtime.coalesce import Coalescer


def test_what_gathers_while_a_batch_is_unanswered_goes_next_as_one_in_order(run):
    async def scenario():
        sent, gate = [], asyncio.Event()

        async def send(batch):
            sent.append(list(batch))
            if len(sent) == 1:
                await gate.wait()  # the first batch is slow to answer

        batches = Coalescer(send, lambda batch, exc: None)
        batches.add(1)
        batches.add(2)  # same loop turn: goes with 1
        await asyncio.sleep(0)
        for item in (3, 4, 5):
            batches.add(item)
        assert batches.remove(4) and not batches.remove(4)
        await asyncio.sleep(0.01)
        assert sent == [[1, 2]] and batches.busy
        gate.set()
        await asyncio.sleep(0.01)
        busy_after = batches.busy
        batches.add(6)  # idle again: goes on its own, at once
        await asyncio.sleep(0.01)
        return sent, busy_after

    assert run(scenario()) == ([[1, 2], [3, 5], [6]], False)


def test_a_failed_batch_is_settled_and_put_back_items_go_first(run):
    async def scenario():
        sent, failed = [], []

        async def send(batch):
            sent.append(list(batch))
            if batch == ["boom"]:
                raise RuntimeError("the actor died")
            if "retry" in batch and len(sent) == 2:
                batches.add("later")
                batches.put_back(["retry"])

        batches = Coalescer(send, lambda batch, exc: failed.append((batch, str(exc))))
        batches.add("boom")
        await asyncio.sleep(0)
        batches.add("retry")
        await asyncio.sleep(0.01)
        return sent, failed, batches.busy

    sent, failed, busy = run(scenario())
    assert failed == [(["boom"], "the actor died")]
    assert sent == [["boom"], ["retry"], ["retry", "later"]] and not busy
