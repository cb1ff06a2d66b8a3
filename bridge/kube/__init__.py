"""The Kubernetes boundary: the only package that imports kubernetes_asyncio and aiohttp's client.

``client`` lists and watches Events and maps every foreign exception to ``errors.KubeError``;
``lines`` splits a watch response into lines; ``lean`` imports kubernetes_asyncio without its
generated model classes. Above this package the bridge speaks its own types only.
"""
