"""The one Kubernetes boundary of every program that talks to the API server (the bridge and
the remediation worker): ``connection`` (credentials that rotate, the request, every foreign
failure mapped), ``errors`` (the one exception tree and the mapping of a status to it),
``paths`` (API paths from checked, escaped segments) and ``lean`` (kubernetes_asyncio without
its generated model classes). ``errors`` and ``paths`` import no client; ``connection`` needs
the ``kube`` extra (kubernetes_asyncio, aiohttp)."""
