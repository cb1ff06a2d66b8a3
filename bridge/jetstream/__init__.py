"""The NATS boundary: the only package that imports nats-py.

``connection`` connects (auth, TLS, reconnecting forever) and maps passing failures to
``errors.JetStreamUnavailable``; ``streams`` creates or checks the stream; ``publishing`` keeps
the window of messages waiting for their JetStream ack; ``fastpath`` holds every use of
nats-py's private parts; ``checkpoints`` keeps the checkpoint in a KV bucket; ``tailing``
reads the stream back (``k8s-event-bridge tail``, the demo).
"""
