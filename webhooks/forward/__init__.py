"""Forwarding: verified events sent on to a team's own HTTP services (``[destinations.<name>]``).

One delivery per (event, destination), created in the transaction that processes the event
(``webhooks.forward.deliveries``), sent by the forwarder (``dispatcher``) of every worker process,
signed the Standard Webhooks way (``signing``), over a client that connects only to addresses
the guard allows (``guard``, ``client``). See ``docs/forwarding.md``.
"""
