"""The Kubernetes boundary: the only package that imports kubernetes_asyncio and aiohttp's client.

``client`` lists and watches any resource (``bridge.core.resources``: Events, Namespaces), reads
objects and Leases, and maps every foreign exception to ``errors.KubeError``;
``paging`` is the list pager (limit and continue); ``lines`` the watch-line reader (a watch
response → its watch events, read by read); ``lean`` imports kubernetes_asyncio without its
generated model classes. Above this package the bridge speaks its own types only: the runtime
gets pages and watch events through its ``ListerWatcher`` port, never by importing this package.
"""
