"""The soak test: the real bridge for minutes under steady Events and a fault schedule
(``make soak``, docs/soak.md)."""
