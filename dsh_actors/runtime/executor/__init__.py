"""The executor's side: the actor that runs calls through their plans, and what it serves.

``executor`` (the actor), ``surface`` (its methods), ``mailboxes`` (batched calls' results),
``channel_server`` (the node's channel), ``placement`` (where a tool runs), ``codemode`` (Code
Mode runs and their queues), ``thread_shares`` and ``agent_calls`` (per-agent shares of it).
It imports the ground floor, the session log and the caller's side (a Code Mode run calls).
"""
