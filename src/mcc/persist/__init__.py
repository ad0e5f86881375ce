"""The persistence service: durable topics kept in SQLite and replayed to late joiners.

>>> from mcc.persist import open_service
>>> with open_service("persist.sqlite", domain_id=7, replica="a") as service:
...     service.wait_ready()

Apps need nothing from here: ``bus.reader("Checkpoint")`` fetches the history and
``bus.writer("Checkpoint").write_stored(cp)`` waits for the commit (``mcc.bus.history``).
What a replica keeps and serves is bounded (`PersistLimits`) and passes an authorization hook
(`Authorize`, default `DefaultPolicy`). docs/persistence.md tells the whole story.
"""

from mcc.bus.history import StoreError
from mcc.persist.inspect import StoreReport, inspect_store
from mcc.persist.limits import PersistLimits
from mcc.persist.policy import Action, Authorize, DefaultPolicy, Principal
from mcc.persist.service import PersistService, ServiceStatistics, open_service
from mcc.persist.store import Store, TopicPolicy

__all__ = [
    "Action",
    "Authorize",
    "DefaultPolicy",
    "PersistLimits",
    "PersistService",
    "Principal",
    "ServiceStatistics",
    "Store",
    "StoreError",
    "StoreReport",
    "TopicPolicy",
    "inspect_store",
    "open_service",
]
