"""Pure byte formats of tiered_log: no I/O here, only constants, structs, encode/decode.

- :mod:`.batch`         the record batch's byte layout, constants and record types
- :mod:`.batch_encode`  records -> batches (what a log appends)
- :mod:`.batch_decode`  verifying and decoding batches (records, columns, a client's
                        batches, a store's batch table)
- :mod:`.records`       the public names of the three above, in one import
- :mod:`.index`         offset-index and time-index entries of a local segment
- :mod:`.remote_index`  remoteLogIndex entries and the remote offset/time index entries
- :mod:`.naming`        every file and object name, in one place
"""
