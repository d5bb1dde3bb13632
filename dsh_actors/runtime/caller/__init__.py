"""The caller's side: how a call made in this process reaches an executor and comes back.

A call (``calls``) takes its plan (``plans``, over the registry's ``link``) and is sent by
route — this process's executor, the node's channel (``channel``), or a remote executor's
tasks (``lanes``, ``transport``) — chosen by ``routes``; ``owner`` holds a process's routes.
It imports the ground floor alone: neither the executor's side nor the registry.
"""
