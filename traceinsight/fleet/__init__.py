"""Fleet analysis: many traces analyzed in parallel (a local process pool, or Ray tasks on a cluster) into one
hive-partitioned Parquet dataset with a manifest, then reported across traces (docs/FLEET.md).

- `inputs`: what to analyze (paths, globs, a list file, object-store URLs through fsspec) and each input's
  content digest;
- `task`: one trace's analysis as a self-contained job that never raises (its error is its result);
- `runners`: where the jobs run (this process, a process pool, Ray);
- `dataset`: the dataset's layout, its manifest, and writing a result into it;
- `run`: the whole `fleet analyze`: plan (skip what is done), run, record;
- `report`: the cross-trace report (`fleet report`), from the dataset alone.
"""
