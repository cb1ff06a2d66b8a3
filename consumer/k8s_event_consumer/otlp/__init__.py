"""``k8s-event-otlp``: the stream's Events and status events as OpenTelemetry log records, sent
to an OTLP/HTTP endpoint (an OpenTelemetry Collector, or a backend that speaks OTLP) in
batches, each message acked only once the endpoint took its record (docs/consumers.md).

- ``mapping``: a message → a log record and its resource (the collector's ``k8sevents``
  receiver's attributes, and more);
- ``sender``: one export request and its answer (accepted, refused, unavailable, blocked);
- ``shipping``: a batch sent, split around a refused record, held while the endpoint is away,
  the refused record to the dead-letter stream;
- ``sizing``: the request size limit in effect, learned from refusals as too large;
- ``running``: the process (``serve``).
"""
