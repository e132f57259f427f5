"""Interoperability check: the official A2A Python SDK (a2a-sdk) against a Murmur node.

Exercises both generations the node serves: the SDK's A2A 1.0 JSON-RPC client (card
discovery, blocking send, streaming send) and its A2A 0.3 compatibility transport
(streaming until input-required, a follow-up reply, get). Run by run.sh, or by hand:
    python a2a_sdk_check.py http://127.0.0.1:PORT     (a node of `murnode demo`)
"""

import asyncio
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import a2a_pb2 as pb


def message(text, task_id=None):
    msg = pb.Message(message_id=str(uuid.uuid4()), role=pb.ROLE_USER, parts=[pb.Part(text=text)])
    if task_id:
        msg.task_id = task_id
    return msg


async def v1(base):
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, base + "/a2a/wordcount").get_agent_card()
    versions = [i.protocol_version for i in card.supported_interfaces]
    assert "1.0" in versions and "0.3" in versions, versions
    for streaming in (False, True):
        client = await ClientFactory(ClientConfig(streaming=streaming)).create_from_url(base + "/a2a/wordcount")
        events = []
        async for event in client.send_message(pb.SendMessageRequest(message=message("one two three"))):
            events.append(str(event))
        await client.close()
        text = " ".join(events)
        assert "TASK_STATE_COMPLETED" in events[-1] and '\\"words\\":3' in text, text
        if streaming:
            assert len(events) >= 3 and "TASK_STATE_SUBMITTED" in events[0] and "TASK_STATE_WORKING" in text, text
        print(f"a2a 1.0 client ({'streaming' if streaming else 'blocking'}): {len(events)} event(s), completed, words=3")


async def v03(base):
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, base + "/a2a/ask").get_agent_card()
        transport = CompatJsonRpcTransport(http, card, base + "/a2a/ask")
        states, task_id = [], None
        async for event in transport.send_message_streaming(pb.SendMessageRequest(message=message("Which way?"))):
            if event.HasField("task"):
                task_id = event.task.id
                states.append(pb.TaskState.Name(event.task.status.state))
            elif event.HasField("status_update"):
                states.append(pb.TaskState.Name(event.status_update.status.state))
            if states and states[-1] == "TASK_STATE_INPUT_REQUIRED":
                break
        assert states == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"], states
        config = pb.SendMessageConfiguration(return_immediately=False)
        await transport.send_message(pb.SendMessageRequest(message=message("left", task_id), configuration=config))
        task = await transport.get_task(pb.GetTaskRequest(id=task_id))
        assert pb.TaskState.Name(task.status.state) == "TASK_STATE_COMPLETED", task
        assert "Which way? -> left" in str(task), task
        print("a2a 0.3 client: stream submitted → working → input-required, reply, get: completed")


async def main(base):
    await v1(base)
    await v03(base)
    print("the official A2A SDK works against this node, both protocol generations")


asyncio.run(main(sys.argv[1].rstrip("/")))
