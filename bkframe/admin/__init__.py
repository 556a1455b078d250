"""A bookie's admin HTTP service: admin API, Prometheus metrics, status page (docs/admin.md).

It lives outside :mod:`bkframe.core` because the status page asks the other bookies through
the client library, which the bookie package never imports; the bookie service is handed
:class:`AdminServer` as a factory (``BookieService(..., admin=AdminServer)``).
"""

from bkframe.admin.http import AdminServer

__all__ = ["AdminServer"]
