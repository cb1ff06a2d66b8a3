"""The remediation worker (docs/consumers.md): Events from the bridge's stream become actions
on the API server — a crash-looping Pod deleted, an OOMKilled container's owner annotated with
a suggested memory limit — dry-run by default, rate-limited per object, each action once and
recorded as a Kubernetes Event, held while the API server is down."""
