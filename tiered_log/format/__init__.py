"""Pure byte formats of tiered_log: no I/O here, only constants, structs, encode/decode.

- :mod:`.records`   record framing in store files (and on the binary wire)
- :mod:`.index`     offset-index and time-index entries of a local segment
- :mod:`.naming`    every file and object name, in one place
"""
