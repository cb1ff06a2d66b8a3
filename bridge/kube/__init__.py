"""The bridge's Kubernetes boundary: the only package of the bridge that reaches
kubernetes_asyncio and aiohttp's client, through the connection it shares with the remediation
worker (``k8s_event_common.kube``: credentials, the request, the error tree).

``client`` lists and watches any resource (``bridge.core.resources``: Events, Namespaces), reads
objects and Leases, on the shared connection; ``paging`` is the list pager (limit and
continue); ``lines`` the watch-line reader (a watch response → its watch events, read by read).
Above this package the bridge speaks its own types only: the runtime gets pages and watch
events through its ``ListerWatcher`` port, never by importing this package.
"""
