"""The remote tier: object storage backends (:mod:`.storage`, :mod:`.fs`, :mod:`.s3`) and the tiering machinery."""
