"""The digests' program (``k8s-event-digests``): one digest per series of Events per window,
a projection of the versions stream that gives the same bytes however often it is made."""
