-- Each kernel family's typical time in this trace, the per-kernel baseline the rules compare launches with: the
-- median of the family's launches whose split-KV was on (the planner balanced them), else the median of all its
-- launches. A family is what launches are compared with (views.kernel_family): the kernel by name, or for
-- FlashAttention-3 the kernel and its tile (its split and unsplit launches are two template instances).
-- Medians as Python's statistics.median: the middle launch, or the mean of the two middle ones (a DOUBLE).
-- Inputs: attention_launches (diagnose/launch_table.py: one row per attention launch).
-- Columns: family_id, family_key; launches; median_ns (all launches); split_on_launches; split_on_median_ns (NULL when
--          none was split on); typical_ns (the reference); typical_source ('split-on median' | 'median').
SELECT family_id, any_value(family_key) AS family_key,
       count(*) AS launches,
       median(dur_ns)::DOUBLE AS median_ns,
       count(*) FILTER (WHERE split_kv) AS split_on_launches,
       (median(dur_ns) FILTER (WHERE split_kv))::DOUBLE AS split_on_median_ns,
       coalesce(split_on_median_ns, median_ns) AS typical_ns,
       CASE WHEN split_on_median_ns IS NULL THEN 'median' ELSE 'split-on median' END AS typical_source
FROM attention_launches
GROUP BY family_id  -- the number, not the text (a full kernel name runs to hundreds of bytes)
