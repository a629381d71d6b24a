//! Analytical jobs (POST/GET /jobs, cancel, retry, artifacts, logs). Filled in by the jobs work.
