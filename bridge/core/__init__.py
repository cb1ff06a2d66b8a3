"""The bridge's pure logic: no I/O, no clients, no logging.

What an Event is (``events``), which ones pass (``filtering``), the CloudEvent and NATS
message each becomes (``converting``, ``messages``, ``subjects``), the watch's next state
(``watchstate``), where it resumes (``resume``), whether a relist missed history (``gaps``),
the one clock (``clock``), the retry schedule (``backoff``), how far the checkpoint may move
(``progress``, ``checkpoints``), and the bounded queue between the watch and the publisher
(``queueing``). Every other layer imports from here; this package imports none of them
(the import contracts in pyproject.toml check it).
"""
