"""The partition log by composition: :class:`~tiered_log.partition.log.TieredLog` and its
collaborators, one module per job.

- :mod:`.log`: the partition log: appends, read resolution across the local and remote
  tiers, truncation, the operations that move several parts at once;
- :mod:`.tiering`: which segments ship, a round of copying and retention, the offsets
  reserved in the bucket;
- :mod:`.scheduler`: when rounds run (a shipper per log on a shared scheduler);
- :mod:`.replication`: leader epochs, the role, the follower's append, the high
  watermark and its checkpoint;
- :mod:`.report`: stats and describe.

Imports go one way: ``log`` -> ``tiering`` -> ``replication``, ``scheduler``; ``log`` ->
``report``; all of them over :mod:`tiered_log.local` and :mod:`tiered_log.remote`.
"""

from .log import TieredBounds, TieredLog
from .scheduler import Shipper, TieringScheduler

__all__ = ["Shipper", "TieredBounds", "TieredLog", "TieringScheduler"]
