-- Every kernel label of the database by its row id: step_launches.sql gives each kernel its label's row id
-- (label_id) instead of the label's text, which the steps stage reads once here (a long trace's kernels repeat a
-- few hundred names, each ~1 KB: 600K rows of text on the 1M-kernel export).
-- Columns: label_id (kernel_labels' rowid); name; kernel; family; backend; phase; phase_evidence; params_json.
SELECT rowid AS label_id, name, kernel, family, backend, phase, phase_evidence, params_json
FROM kernel_labels
