"""The local tier: segments on disk, the segmented log, crash recovery, async access.

- :mod:`.log`            :class:`Log`, the segmented log (append, read, roll, retention,
                         truncation, recovery on open)
- :mod:`.segment`        one segment: store file, sparse indexes, seal, cut, reads
- :mod:`.segment_index`  building a segment's indexes from batches; the sealed-index LRU
- :mod:`.files`          fsync of a directory, atomic whole-file writes, shared read fds
- :mod:`.aio`            :class:`AsyncLog`, the log for asyncio callers
"""
