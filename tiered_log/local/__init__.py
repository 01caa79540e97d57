"""The local tier: segments on disk, the segmented log, crash recovery, async access."""
