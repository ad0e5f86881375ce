"""Request/reply over two topics: the one core every exchange of the bus uses.

Cyclone DDS has no DDS-RPC, so a request topic and a reply topic carry it. The core:

- **correlation** (`common`): each request carries ``client_id`` and a unique id (the type's
  first key field: ``command_id``, ``request_id``); a reply copies both, and a requester takes
  only its own replies, each once.
- **calling** (`client.RpcClient`): pending calls, deadlines, and — opt-in, for idempotent
  calls — resending when the replier goes away or restarts (`PeerLostError` once retries are
  spent). A synchronous call (`RpcClient.call`) waits for its reply in the calling thread and
  takes it there; futures (`RpcClient.submit`) are served by a reply thread.
- **serving** (`server.RpcServer`): who asked (the writer's participant from discovery), a
  request whose ``deadline_ns`` passed — on arrival or while queued — is answered with an
  error and not run, pluggable queueing (in the reader loop in arrival order by default;
  `queues.FairQueue` per client with batching for the compute service, whose worker takes the
  requests itself while idle), replies written only once the requester's reply reader is
  matched and as disposed + unregistered instances where asked.
- **scatter-gather** (`gather.ScatterGather`): one request to every matched replier, one reply
  from each, within bounds (the history of the persistence service's replicas).
- `Requester`/`Replier` (`endpoints`): the typed control-plane pair (``Command``/
  ``CommandReply``) on top.

**Who asked.** A requester writes in the partition of its *principal* on a *channel*
(``cmd/operator``, ``approval/console``: `principal_partition`); a replier reads its channel's
partitions (``cmd/*``) and learns who asked from the partition of the matched writer
(`Replier.sender`), never from a field the sender fills in. In a secured mission that is the
authenticated identity: each identity's permissions let it publish requests in its own
partitions only, and access control checks a remote writer's partitions against its signed
permissions.
"""

from mcc.bus.rpc.client import Call, RpcClient
from mcc.bus.rpc.common import (
    APPROVAL_CHANNEL,
    CHANNELS,
    COMMAND_CHANNEL,
    PeerCache,
    channel_partitions,
    deadline_passed,
    default_client_id,
    fail_reply,
    id_field,
    ids_too_long,
    matched_participants,
    principal_partition,
    stamp_reply,
    write_dispose,
)
from mcc.bus.rpc.endpoints import Replier, Requester
from mcc.bus.rpc.queues import FairQueue, QueueFullError
from mcc.bus.rpc.server import Pending, RpcServer

__all__ = [
    "APPROVAL_CHANNEL",
    "CHANNELS",
    "COMMAND_CHANNEL",
    "Call",
    "FairQueue",
    "PeerCache",
    "Pending",
    "QueueFullError",
    "Replier",
    "Requester",
    "RpcClient",
    "RpcServer",
    "channel_partitions",
    "deadline_passed",
    "default_client_id",
    "fail_reply",
    "id_field",
    "ids_too_long",
    "matched_participants",
    "principal_partition",
    "stamp_reply",
    "write_dispose",
]
