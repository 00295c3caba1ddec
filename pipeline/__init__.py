"""Offset history and analytics over kcoord's on-disk log: plain Python and Spark.

- ``pipeline.segments``: finding and reading segment files (live, history, topic data).
- ``pipeline.history``: every job in plain Python (the test oracle; ``offsets_as_of``).
- ``pipeline.source``: the ``kcoord`` and ``kcoord_batches`` Spark data sources.
- ``pipeline.jobs``: the jobs as Spark DataFrame plans.
- ``pipeline.spark`` and ``pipeline.cli``: starting Spark and ``kcoord pipeline``.

Only ``segments`` and ``history`` may be imported without pyspark installed.
"""
